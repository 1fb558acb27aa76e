"""Django signals: the single source of the library's events.

Metrics (``contrib.prometheus``, ``contrib.opentelemetry``) and log lines are
receivers of these. They are sent with :func:`send`, which logs a receiver's
exception and never lets it change an answer.

``outcome`` is sent once per protected request, task or call, with:

- ``sender``: ``"http"``, ``"task"`` or ``"call"``;
- ``outcome``: one of :data:`OUTCOMES`;
- ``method`` and ``route`` (``None`` outside HTTP; route is the URL pattern's
  name or the view's dotted name, never the path: labels stay bounded);
- ``status``: the HTTP status answered (``None`` for tasks and calls);
- ``stored``: for ``executed``, whether the answer was stored (``False`` for a
  transient answer or an exception); otherwise ``None``;
- ``source``: for ``replayed``, ``"database"`` or ``"cache"``; otherwise ``None``;
- ``protocol``: ``"lock"`` or ``"lease"`` (``None`` when no claim was tried);
- ``claim_seconds``: time spent claiming (``None`` when no claim was tried);
- ``waited_seconds``: time spent waiting for an in-flight duplicate (0 if none);
- ``total_seconds``: the whole protected call;
- ``key_digest``: :func:`key_digest` of (tenant, key), never the key itself
  (``None`` when the request carried no usable key).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, Protocol

from django.conf import settings
from django.dispatch import Signal
from django.utils.encoding import force_bytes

from idempotency_django._conf import conf

if TYPE_CHECKING:
    from idempotency_django.exceptions import IdempotencyError


class Timings(Protocol):
    """What an outcome reports of a claim (``execution.Run`` has it; no import needed)."""

    protocol: str
    claim_seconds: float
    waited_seconds: float


logger = logging.getLogger("idempotency_django")

EXECUTED: Final = "executed"
REPLAYED: Final = "replayed"
IN_PROGRESS: Final = "in_progress"
KEY_REUSED: Final = "key_reused"
KEY_MISSING: Final = "key_missing"
KEY_MALFORMED: Final = "key_malformed"
UNAVAILABLE: Final = "unavailable"
OUTCOMES: Final = frozenset(
    {EXECUTED, REPLAYED, IN_PROGRESS, KEY_REUSED, KEY_MISSING, KEY_MALFORMED, UNAVAILABLE}
)

#: One per protected request, task or call; see the module docstring.
outcome = Signal()
#: One per reclaimed entry batch: ``how`` ("takeover", "purge", "admin"), ``count``, ``database``.
entry_reclaimed = Signal()
#: One per purge run: ``expired``, ``abandoned``, ``dry_run``, ``database``, ``seconds``.
purge_finished = Signal()
#: One per replay-cache failure: ``alias``, ``operation`` ("get" or "set"), ``error``.
cache_failed = Signal()
#: A protected view wrote to another database than its entry's (production: it ran
#: uncovered): ``alias`` written to, ``database`` holding the entry.
uncovered_write = Signal()


# Receivers that only act on some outcomes (the log's, below its level): by
# dispatch_uid, whether they want a given outcome. An outcome nobody wants is
# not built at all (no key digest, no send).
_selective: dict[str, Callable[[str], bool]] = {}


def connect_selective(
    signal: Signal, receiver: Callable[..., Any], dispatch_uid: str, wants: Callable[[str], bool]
) -> None:
    """Connect ``receiver`` to :data:`outcome`-like ``signal``, telling which outcomes it wants."""
    signal.connect(receiver, dispatch_uid=dispatch_uid)
    _selective[dispatch_uid] = wants


def wanted(name: str) -> bool:
    """Whether any receiver of :data:`outcome` would act on an outcome called ``name``."""
    for lookup_key, *_ in outcome.receivers:
        wants = _selective.get(lookup_key[0]) if isinstance(lookup_key[0], str) else None
        if wants is None or wants(name):
            return True
    return False


def send(signal: Signal, sender: object, **kwargs: Any) -> None:
    """Send ``signal``; a receiver that raises is logged, never propagated."""
    if not signal.has_listeners(sender):
        return
    for receiver, result in signal.send_robust(sender, **kwargs):
        if isinstance(result, Exception):
            logger.error("idempotency signal receiver %r raised", receiver, exc_info=result)


_BY_CODE: Final = {
    "key-missing": KEY_MISSING,
    "key-malformed": KEY_MALFORMED,
    "key-reused": KEY_REUSED,
    "in-progress": IN_PROGRESS,
    "unavailable": UNAVAILABLE,
}


def refusal(code: str) -> str:
    """The outcome for an ``IdempotencyError`` of this ``code``."""
    return _BY_CODE.get(code, UNAVAILABLE)


def key_digest(tenant: str, key: str) -> str:
    """A short keyed digest (HMAC-SHA256 prefix) of (tenant, key) for logs: never the key.

    Keyed, so that nobody reading logs or metrics can test guesses of a
    low-entropy key against it (keys are bearer secrets).
    """
    data = json.dumps([tenant, key], ensure_ascii=False).encode("utf-8", "surrogatepass")
    configured = conf.SECRET
    source = force_bytes(settings.SECRET_KEY if configured is None else configured)
    return hmac.digest(_digest_key(source), data, "sha256").hex()[:12]


@functools.lru_cache(maxsize=8)
def _digest_key(source: bytes) -> bytes:
    """From settings alone (no database on a log line): ``IDEMPOTENCY_SECRET`` if set, else
    ``SECRET_KEY``, so a rotation only changes the digests logged from then on."""
    seed = hashlib.sha256(b"idempotency_django.derive" + source).digest()
    return hmac.new(seed, b"idempotency_django.key_digest", hashlib.sha256).digest()


class Observation:
    """What one protected request, task or call did: sent as one :data:`outcome` at its end.

    Both adapters (``core`` for HTTP, ``calls`` for tasks and calls) record into
    one of these, so the signal's fields mean the same thing whoever sends it.
    """

    def __init__(
        self,
        sender: str,
        method: str | None = None,
        route: str | None = None,
        key_digest: str | None = None,
    ) -> None:
        self.sender, self.method, self.route, self.key_digest = sender, method, route, key_digest
        self.key: tuple[str, str] | None = None  # (tenant, key): digested only if sent
        self.started = time.monotonic()
        self.skip = False  # no key, optional: the request passed through unprotected
        self.outcome: str | None = None
        self.status: int | None = None
        self.stored: bool | None = None
        self.source: str | None = None
        self.slot: Timings | None = None  # the claim's timings, once one was tried

    def replayed(self, source: str) -> None:
        self.outcome, self.source = REPLAYED, source

    def executed(self, stored: bool) -> None:
        self.outcome, self.stored = EXECUTED, stored

    def refused(self, error: IdempotencyError) -> None:
        self.outcome = refusal(error.code)

    def raised(self) -> None:
        if self.outcome is None and self.slot is not None:
            self.executed(stored=False)  # the body raised: rolled back, key freed

    def answered(self, status: int | None) -> None:
        self.status = status
        if self.outcome is None:
            self.executed(stored=True)

    def send(self) -> None:
        if self.skip or self.outcome is None or not wanted(self.outcome):
            return
        if self.key_digest is None and self.key is not None:
            self.key_digest = key_digest(*self.key)
        slot = self.slot
        send(
            outcome,
            sender=self.sender,
            outcome=self.outcome,
            method=self.method,
            route=self.route,
            status=self.status,
            stored=self.stored,
            source=self.source,
            protocol=None if slot is None else slot.protocol,
            claim_seconds=None if slot is None else slot.claim_seconds,
            waited_seconds=0.0 if slot is None else slot.waited_seconds,
            total_seconds=time.monotonic() - self.started,
            key_digest=self.key_digest,
        )


# Outbox (``idempotency_django.outbox``): sent with ``sender`` ``"fast"`` (the
# on_commit publish) or ``"relay"``.
#: One per row published: ``task`` (its name), ``attempts`` (this one included),
#: ``key_digest`` (of ``("", key)``).
outbox_published = Signal()
#: One per failed publish: ``task``, ``attempts`` (this one included), ``error`` (the exception).
outbox_failed = Signal()


# Giving up and uncertain outcomes (``idempotency_django.consumers``, the outbox, tasks).
#: One per message, outbox row or task given up on: ``sender`` ``"consumer"``, ``"outbox"``
#: or ``"task"``; ``key_digest``; ``attempts`` (failures counted); ``error`` (the last one);
#: ``uncertain`` (its handler may have called an outside service before failing).
dead_lettered = Signal()
#: One per execution whose outcome outside the database nobody knows: a claim taken over
#: (``how`` ``"takeover"``, ``"purge"``, ``"admin"``: its holder may have called a payment
#: provider before it died), or a dead letter whose handler derived a key (``"dead_letter"``).
#: Also ``count``, ``database`` and ``key_digest`` (``None`` for a batch). Reconcile with the
#: outside system (ask it by the derived key) before the work runs again.
outcome_uncertain = Signal()


def uncertain(how: str, database: str, count: int = 1, key_digest: str | None = None) -> None:
    """Log and send :data:`outcome_uncertain` (one warning line an operator can alert on)."""
    logger.warning(
        "idempotency: uncertain outcome (%s) on %r: %d execution(s)%s may have reached an "
        "outside service before they stopped; reconcile before they run again",
        how,
        database,
        count,
        f" [key {key_digest}]" if key_digest else "",
    )
    send(
        outcome_uncertain,
        sender=how,
        how=how,
        count=count,
        database=database,
        key_digest=key_digest,
    )


__all__ = [
    "cache_failed",
    "dead_lettered",
    "entry_reclaimed",
    "outbox_failed",
    "outbox_published",
    "outcome",
    "outcome_uncertain",
    "purge_finished",
    "uncovered_write",
]
