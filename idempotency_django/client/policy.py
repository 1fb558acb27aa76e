"""What the Python client decides, with no HTTP library: keys, when to retry, how long to wait.

The transports of :mod:`idempotency_django.client` only translate their library's
requests, answers and errors into the calls of :class:`Attempts`, so the rules
(one key per intent, which answers are worth another try, how ``Retry-After`` and
the budgets bound the waiting) are written once for httpx and requests alike.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import time
import uuid
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

from idempotency_django.exceptions import PROBLEM_BASE, AnswerTooLarge, AnswerUnreadable

HEADER = "Idempotency-Key"
# Sent from a request's second attempt on: its number of earlier attempts.
RETRY_HEADER = "Idempotency-Retry"
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# The answers the server stores nothing for (docs/http.rst): the key is free again, so
# sending it again is safe and may succeed. Every other 4xx is final (or stored and
# replayed): sending it again can't change it, so it goes back to the caller at once.
TRANSIENT_4XX = frozenset({408, 409, 425, 429})
PROBLEM_JSON = "application/problem+json"
# 5xx answers the server gives again to every retry (docs/http.rst): the answer is too big to
# store (each retry would run the view again for nothing) or the stored one does not open.
FINAL_PROBLEMS = frozenset(PROBLEM_BASE + e.code for e in (AnswerTooLarge, AnswerUnreadable))
# delay-seconds is 1*DIGIT, ASCII digits only (RFC 9110 §10.2.3, §5.6.1): str.isdigit()
# also takes a superscript "²", which float() then refuses with a ValueError.
_DELAY_SECONDS = re.compile(r"[0-9]+")


def uuid7() -> uuid.UUID:
    """A version 7 UUID (RFC 9562 §5.7): 48 bits of Unix milliseconds, then 74 random bits.

    Keys sort by creation time, which keeps a B-tree index on them compact; the
    standard library has ``uuid.uuid7`` only from Python 3.14.
    """
    milliseconds = time.time_ns() // 1_000_000 & (1 << 48) - 1
    value = milliseconds << 80 | int.from_bytes(os.urandom(10), "big")
    value = value & ~(0xF << 76) | 0x7 << 76  # version 7
    value = value & ~(0x3 << 62) | 0x2 << 62  # variant 10 (RFC 9562)
    return uuid.UUID(int=value)


def new_key() -> str:
    """A fresh key for one intent: a UUIDv7 string."""
    return str(uuid7())


class RetriesExhausted(Exception):
    """The client stopped retrying; ``key`` is the Idempotency-Key every attempt carried.

    The request may or may not have taken effect: send it again later with the same
    key (``headers={"Idempotency-Key": error.key}``), or ask the server about the key
    (``GET …/idempotency/keys/<key>/``, docs/http.rst).
    """

    def __init__(
        self, key: str, attempts: int, status: int | None, reason: str, elapsed: float
    ) -> None:
        self.key, self.attempts, self.status = key, attempts, status
        self.reason, self.elapsed = reason, elapsed
        # ``reason`` already names the last outcome (a status or an error) and why it stopped.
        super().__init__(
            f"gave up after {attempts} attempt(s) in {elapsed:.1f}s ({reason}); "
            f"Idempotency-Key {key!r}: retry with it, or look it up, to learn what happened."
        )


def _uniform() -> float:
    return random.random()  # jitter, not a secret


@dataclass(frozen=True)
class RetryPolicy:
    """How hard the client tries. Every field has a default; ``sleep``, ``async_sleep``,
    ``clock`` and ``random`` are there for tests (and for a caller with its own clock).

    - ``max_attempts``: attempts in all, the first included.
    - ``max_time``: seconds from the first attempt after which no new attempt starts
      (a wait that would end past it is not begun).
    - ``backoff``/``max_backoff``: the exponential backoff's first and largest step;
      each wait is drawn uniformly from [0, step] ("full jitter"), so clients that
      failed together don't retry together.
    - ``max_retry_after``: the most a server's ``Retry-After`` makes the client wait.
    - ``final_problems``: problem ``type`` URIs (RFC 9457) that make a 5xx (or a
      transient 4xx) final: returned at once, never retried. By default the server's
      ``answer-too-large`` and ``answer-unreadable``, which every retry would get again.
    """

    max_attempts: int = 5
    max_time: float = 30.0
    backoff: float = 0.25
    max_backoff: float = 8.0
    max_retry_after: float = 30.0
    final_problems: frozenset[str] = FINAL_PROBLEMS
    header: str = HEADER
    methods: frozenset[str] = UNSAFE_METHODS
    sleep: Callable[[float], None] = time.sleep
    async_sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    clock: Callable[[], float] = time.monotonic
    random: Callable[[], float] = _uniform

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(
                f"RetryPolicy(max_attempts=...) must be at least 1, got {self.max_attempts}."
            )
        for name in ("max_time", "backoff", "max_backoff", "max_retry_after"):
            if getattr(self, name) < 0:
                raise ValueError(f"RetryPolicy({name}=...) can't be negative.")
        object.__setattr__(self, "methods", frozenset(m.upper() for m in self.methods))

    def applies(self, method: str) -> bool:
        return method.upper() in self.methods

    def is_final(self, status: int, content_type: str | None, body: bytes | None) -> bool:
        """Whether an answer goes back to the caller as it is (no other attempt).

        ``body`` is read only where it can matter (:func:`needs_body`); ``None`` otherwise.
        """
        if not retryable_status(status):
            return True
        return (
            body is not None
            and is_problem(content_type)
            and (problem_type(body) in self.final_problems)
        )


def retryable_status(status: int) -> bool:
    """5xx, and the transient 4xx the server stores nothing for (409 in flight, 429, …)."""
    return status >= 500 or status in TRANSIENT_4XX


def is_problem(content_type: str | None) -> bool:
    """Whether a ``Content-Type`` is RFC 9457's ``application/problem+json``."""
    return (content_type or "").partition(";")[0].strip().lower() == PROBLEM_JSON


def needs_body(status: int, content_type: str | None) -> bool:
    """Whether :meth:`RetryPolicy.is_final` needs the body: a retryable problem's type."""
    return retryable_status(status) and is_problem(content_type)


def problem_type(body: bytes) -> str | None:
    """A problem+json body's ``type``; ``None`` when there is none or it doesn't parse."""
    try:
        problem = json.loads(body)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None
    kind = problem.get("type") if isinstance(problem, dict) else None
    return kind if isinstance(kind, str) else None


def retry_after_seconds(
    value: str | None, now: Callable[[], datetime] | None = None
) -> float | None:
    """``Retry-After`` as seconds: delay-seconds (ASCII digits) or an HTTP-date (RFC 9110
    §10.2.3); ``None`` if absent or anything else, which the caller ignores."""
    if not value:
        return None
    value = value.strip(" \t")  # optional whitespace around a field value (§5.5)
    if _DELAY_SECONDS.fullmatch(value):
        return float(value)  # a huge one is inf, which max_retry_after bounds
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or _utcnow)()).total_seconds())


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass
class Attempts:
    """One request's attempts under ``policy``, all carrying ``key``."""

    policy: RetryPolicy
    key: str
    count: int = 0
    started: float = field(default=0.0)

    def __post_init__(self) -> None:
        self.started = self.policy.clock()

    def begin(self, headers: MutableMapping[str, Any]) -> None:
        """Count an attempt; from the second on, mark its ``headers`` as a retry's.

        The mark lets the server answer from the stored answer at once (one read, no
        transaction), where a first attempt claims the key.
        """
        self.count += 1
        if self.count > 1:
            headers[RETRY_HEADER] = str(self.count - 1)

    def after_status(self, status: int, retry_after: str | None) -> float:
        """The wait before the next attempt after a retryable answer; raises when none is left."""
        hinted = retry_after_seconds(retry_after)
        wait = self._backoff() if hinted is None else min(hinted, self.policy.max_retry_after)
        return self._next(wait, status, f"the server answered {status}")

    def after_error(self, error: BaseException) -> float:
        """The wait after no answer (refused, reset, timed out); raises when none is left."""
        return self._next(self._backoff(), None, f"{type(error).__name__}: {error}")

    def _backoff(self) -> float:
        step = min(self.policy.max_backoff, self.policy.backoff * 2.0 ** (self.count - 1))
        return step * self.policy.random()

    def _next(self, wait: float, status: int | None, reason: str) -> float:
        elapsed = self.policy.clock() - self.started
        if self.count >= self.policy.max_attempts:
            raise self._exhausted(status, f"{reason}; no attempts left", elapsed)
        if elapsed + wait > self.policy.max_time:
            raise self._exhausted(status, f"{reason}; out of time", elapsed)
        return wait

    def _exhausted(self, status: int | None, reason: str, elapsed: float) -> RetriesExhausted:
        return RetriesExhausted(self.key, self.count, status, reason, elapsed)


def key_for(existing: str | None) -> str:
    """The caller's own key (the request's header), or a fresh one."""
    return existing or new_key()


__all__ = [
    "FINAL_PROBLEMS",
    "HEADER",
    "PROBLEM_JSON",
    "RETRY_HEADER",
    "TRANSIENT_4XX",
    "UNSAFE_METHODS",
    "Attempts",
    "RetriesExhausted",
    "RetryPolicy",
    "is_problem",
    "key_for",
    "needs_body",
    "new_key",
    "problem_type",
    "retry_after_seconds",
    "retryable_status",
    "uuid7",
]
