"""What to tell the broker (:class:`Verdict`) and when to give up (:class:`GiveUp`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final, Literal

from idempotency_django._conf import as_timedelta

Action = Literal["ack", "retry", "dead_letter"]
ACK: Final = "ack"
RETRY: Final = "retry"
DEAD_LETTER: Final = "dead_letter"


@dataclass(frozen=True)
class GiveUp:
    """When a failing message is given up on, and how long to wait between its tries.

    ``max_attempts`` handler failures, or failures for longer than ``deadline``
    (since the first, by the database's clock), end in ``"dead_letter"``. The
    n-th failure waits ``min(backoff_cap, backoff * 2 ** (n - 1))`` seconds; a
    store outage waits ``unavailable_delay``.
    """

    max_attempts: int = 5
    deadline: float | timedelta | None = None
    backoff: float = 1.0
    backoff_cap: float = 300.0
    unavailable_delay: float = 5.0

    def __post_init__(self) -> None:
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int):
            raise TypeError(f"GiveUp(max_attempts=...) takes an int, got {self.max_attempts!r}")
        if self.max_attempts < 1:
            raise ValueError(
                f"GiveUp(max_attempts=...) must be at least 1, got {self.max_attempts}"
            )
        for name in ("backoff", "backoff_cap", "unavailable_delay"):
            if as_timedelta(getattr(self, name)) < timedelta(0):
                raise ValueError(f"GiveUp({name}=...) must not be negative")
        if self.deadline is not None and as_timedelta(self.deadline) <= timedelta(0):
            raise ValueError("GiveUp(deadline=...) must be positive")

    def exhausted(self, failures: int, age: float) -> bool:
        """Whether ``failures`` failures, the first ``age`` seconds ago, are enough."""
        late = self.deadline is not None and age >= as_timedelta(self.deadline).total_seconds()
        return failures >= self.max_attempts or late

    def delay(self, failures: int) -> float:
        return float(min(self.backoff_cap, self.backoff * 2 ** min(failures - 1, 32)))


@dataclass(frozen=True)
class Verdict:
    """What to tell the broker: ``action`` and, for ``"retry"``, ``delay`` seconds.

    ``outcome`` says why (``"executed"``, ``"replayed"``, ``"in_progress"``,
    ``"unavailable"``, ``"failed"``, ``"exhausted"``); ``result`` is the
    handler's (stored) result on ``"ack"``; ``error`` the exception otherwise;
    ``failures`` the failures counted so far (0 when none was).
    """

    action: Action
    delay: float = 0.0
    outcome: str = ""
    result: Any = None
    error: BaseException | None = None
    failures: int = 0
