"""Only the delivery that runs the handler counts an attempt (issue 53, item 5).

A redelivery that meets the message running (it waits for the run, or is told to retry)
runs nothing: it must never count as a failure, so one real failure never reads as two and
a message is never both dead-lettered and executed. Real threads, each on its own
connection; every step waits on an event (the handler held at a gate, the redelivery seen
waiting for the claim or stopped before it), never on a sleep.

The matrix: ``max_attempts`` 1, 2, 3 by how the redelivery meets the first run (it waits for
it; it arrives while it runs and claims once it failed; it is refused while it runs; it
comes after the failure; after the success), the later deliveries succeeding, or (for 2
and 3) failing too. Each time: no message dead-lettered and executed by deliveries in
flight together, and the failures counted (in the verdicts and in ``ConsumerFailure``) are
the handler runs that raised. A delivery that arrives once the message is a dead letter
(max_attempts 1, "refused" and "after_failure") is the message sent again: it starts afresh,
as docs/consumers.rst says.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connection

from idempotency_django import idempotent_call
from idempotency_django.consumers import GiveUp, Verdict, consume
from idempotency_django.consumers import core as consumer_core
from idempotency_django.consumers.models import ConsumerFailure
from tests.conftest import close_connections_after
from tests.lock_helpers import query, wait_for
from tests.testapp.models import Charge

pytestmark = [pytest.mark.requires_server, pytest.mark.django_db(transaction=True)]

MESSAGE = "order-7"
WITHIN = 60  # seconds: bounds a broken run only; every wait below ends on an event


@pytest.fixture(params=[pytest.param("lock", marks=pytest.mark.requires_postgres), "lease"])
def protocol(request: pytest.FixtureRequest, settings: Any) -> str:
    settings.IDEMPOTENCY_PROTOCOL = request.param
    return str(request.param)


class Boom(Exception):
    """The handler's own failure."""


class Delivery:
    """One delivery of ``MESSAGE``, consumed in a thread of its own (its own connection).

    Its handler says it ``entered``, waits for ``release`` (set at once unless ``held``),
    then raises (``fails``) or writes a charge. ``before_claim`` (armed by :func:`stops`)
    holds the delivery after it arrived, before it claims the message.
    """

    def __init__(self, name: str, policy: GiveUp, *, fails: bool, held: bool = False) -> None:
        self.name, self.policy, self.fails = name, policy, fails
        self.entered, self.release = threading.Event(), threading.Event()
        self.waiting, self.at_claim, self.claim = (threading.Event() for _ in range(3))
        if not held:
            self.release.set()
        self.verdict: Verdict | None = None
        self.thread = threading.Thread(target=close_connections_after(self._consume), daemon=True)

    def handler(self) -> dict[str, int]:
        self.entered.set()
        assert self.release.wait(WITHIN), f"{self.name}'s handler was never released"
        if self.fails:
            raise Boom(self.name)
        return {"charge": Charge.objects.create(reference=self.name, amount=1).pk}

    def _consume(self) -> None:
        self.verdict = consume(MESSAGE, self.handler, policy=self.policy)

    def start(self) -> Delivery:
        self.thread.start()
        return self

    def done(self) -> Verdict:
        self.thread.join(WITHIN)
        assert not self.thread.is_alive(), f"delivery {self.name} hung"
        assert self.verdict is not None, f"delivery {self.name} raised"
        return self.verdict

    @property
    def raised(self) -> bool:
        return self.fails and self.entered.is_set()


def wait(event: threading.Event, what: str) -> None:
    assert event.wait(WITHIN), f"never: {what}"


@contextmanager
def seen_waiting(monkeypatch: pytest.MonkeyPatch, delivery: Delivery) -> Iterator[None]:
    """``delivery.waiting`` is set once it waits for the claim's holder: under "lock" its
    claim queues for the key's advisory lock (seen in ``pg_locks``), under "lease" it polls."""
    from idempotency_django._protocol import execution

    real = execution._wait

    def spy(*args: Any, **kwargs: Any) -> None:
        if threading.current_thread() is delivery.thread:
            delivery.waiting.set()
        real(*args, **kwargs)

    def queued() -> bool:
        if not delivery.waiting.is_set() and query(_QUEUED):
            delivery.waiting.set()
        return delivery.waiting.is_set()

    monkeypatch.setattr(execution, "_wait", spy)
    yield
    if connection.vendor == "postgresql":
        wait_for(queued, WITHIN, "the redelivery waiting for the claim")


_QUEUED = (
    "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
    "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
)


def stops(monkeypatch: pytest.MonkeyPatch, delivery: Delivery) -> None:
    """``delivery`` stops after it arrived, just before it claims, until ``claim`` is set."""
    real = idempotent_call  # what the core calls

    def gate(*args: Any, **kwargs: Any) -> Any:
        if threading.current_thread() is delivery.thread:
            delivery.at_claim.set()
            wait(delivery.claim, f"{delivery.name} let claim")
        return real(*args, **kwargs)

    monkeypatch.setattr(consumer_core, "idempotent_call", gate)


# --- the interleavings: the first delivery fails (but "after_success"); ``later``: the ones
# --- after it fail too


def waits(policy: GiveUp, later: bool, mp: pytest.MonkeyPatch, settings: Any) -> list[Delivery]:
    """The redelivery arrives while the first runs and waits for it (IDEMPOTENCY_WAIT)."""
    settings.IDEMPOTENCY_WAIT = WITHIN
    first = Delivery("first", policy, fails=True, held=True).start()
    wait(first.entered, "the first run started")
    second = Delivery("second", policy, fails=later)
    with seen_waiting(mp, second):
        second.start()
    wait(second.waiting, "the redelivery waits for the running one")
    first.release.set()
    first.done(), second.done()
    return [first, second]


def claims_after(
    policy: GiveUp, later: bool, mp: pytest.MonkeyPatch, settings: Any
) -> list[Delivery]:
    """It arrives while the first runs, and reaches its claim once the first failed."""
    first = Delivery("first", policy, fails=True, held=True).start()
    wait(first.entered, "the first run started")
    second = Delivery("second", policy, fails=later)
    stops(mp, second)
    second.start()
    wait(second.at_claim, "the redelivery arrived")
    first.release.set()
    first.done()
    second.claim.set()
    second.done()
    return [first, second]


def refused(policy: GiveUp, later: bool, mp: pytest.MonkeyPatch, settings: Any) -> list[Delivery]:
    """It is told to retry while the first runs (no wait); a third comes after the failure."""
    first = Delivery("first", policy, fails=True, held=True).start()
    wait(first.entered, "the first run started")
    second = Delivery("second", policy, fails=later).start()
    second.done()
    first.release.set()
    first.done()
    return [first, second, Delivery("third", policy, fails=later).start()]


def after_failure(
    policy: GiveUp, later: bool, mp: pytest.MonkeyPatch, settings: Any
) -> list[Delivery]:
    first = Delivery("first", policy, fails=True).start()
    first.done()
    return [first, Delivery("second", policy, fails=later).start()]


def after_success(
    policy: GiveUp, later: bool, mp: pytest.MonkeyPatch, settings: Any
) -> list[Delivery]:
    first = Delivery("first", policy, fails=False).start()
    first.done()
    return [first, Delivery("second", policy, fails=later).start()]


Interleaving = Callable[[GiveUp, bool, pytest.MonkeyPatch, Any], list[Delivery]]
INTERLEAVINGS: dict[str, Interleaving] = {
    "waits": waits,
    "claims_after": claims_after,
    "refused": refused,
    "after_failure": after_failure,
    "after_success": after_success,
}
# The deliveries in flight together with the first run (the others came after its verdict).
IN_FLIGHT = {"waits": 2, "claims_after": 2, "refused": 2, "after_failure": 1, "after_success": 1}


@pytest.mark.parametrize(
    ("max_attempts", "later_fails"),
    # After a dead letter (max_attempts 1) a failing message starts a new series: left out.
    [(1, False), (2, False), (3, False), (2, True), (3, True)],
    ids=["1", "2", "3", "2-both-fail", "3-both-fail"],
)
@pytest.mark.parametrize("interleaving", list(INTERLEAVINGS))
def test_a_redelivery_never_counts_unless_it_runs(
    protocol: str,
    max_attempts: int,
    later_fails: bool,
    interleaving: str,
    monkeypatch: pytest.MonkeyPatch,
    settings: Any,
) -> None:
    policy = GiveUp(max_attempts=max_attempts, backoff=0.0)
    deliveries = INTERLEAVINGS[interleaving](policy, later_fails, monkeypatch, settings)
    verdicts = [delivery.done() for delivery in deliveries]
    seen = [
        (d.name, v.action, v.outcome, v.failures) for d, v in zip(deliveries, verdicts, strict=True)
    ]

    # A delivery's count is the handler runs that raised up to its own (none if it ran nothing).
    raised = 0
    for delivery, verdict in zip(deliveries, verdicts, strict=True):
        raised += delivery.raised
        expected = raised if delivery.raised else 0
        assert verdict.failures == expected or verdict.outcome == "exhausted", seen
        if verdict.outcome in ("failed", "exhausted"):
            assert verdict.failures == raised, seen
    executed = Charge.objects.exists()
    flight = verdicts[: IN_FLIGHT[interleaving]]
    assert not (
        any(v.outcome == "executed" for v in flight)
        and any(v.action == "dead_letter" for v in flight)
    ), f"dead-lettered and executed: {seen}"
    # Every run that raised is counted once, and a run that succeeded forgets them.
    rows = list(ConsumerFailure.objects.values_list("failures", flat=True))
    assert rows == ([] if executed else [raised]), seen
    assert Charge.objects.count() <= 1
    first = verdicts[0]
    if interleaving == "after_success":
        assert [v.outcome for v in verdicts] == ["executed", "replayed"], seen
        return
    # The first run's one failure: a retry, or (its last attempt) a dead letter, never more.
    assert (first.outcome, first.failures) == (
        "exhausted" if max_attempts == 1 else "failed",
        1,
    ), seen
    if later_fails:
        last = verdicts[-1]
        assert (last.action, last.failures) == (
            "dead_letter" if max_attempts == 2 else "retry",
            2,
        ), seen
    elif max_attempts > 1:
        assert executed, f"the redelivery after a retried failure must run: {seen}"
    elif interleaving in ("waits", "claims_after"):
        # In flight when the first run was given up on: a dead letter too, never run.
        assert [(v.action, v.outcome) for v in verdicts] == [("dead_letter", "exhausted")] * 2
        assert not executed, seen
    else:
        # Delivered after the dead letter: the message sent again, which starts afresh
        # (docs/consumers.rst), counted anew.
        assert verdicts[-1].outcome == "executed", seen
