"""A slow last attempt outlives its lease: never dead-lettered while it runs, never run twice
(issue 53, item 17: "read in the code, not tried").

The SPEC's row "a request runs longer than the lease: while its transaction is open no other
request and no purge may take its entry over" holds for consumers too. The message's last
attempt (``max_attempts`` 2, one failure before) is held in its handler, its business write
done, until the database's clock is past its lease ("lease": the entry's ``locked_until``;
"lock", which writes no entry until it commits: its transaction's start plus the lease).
Then a redelivery arrives (refused at once, or waiting for the key) and the purge runs: the
redelivery runs nothing, counts nothing and dead-letters nothing; the purge leaves the entry;
the held run ends as it would have (executed, or the message's one dead letter).

Tried: while the run's transaction is open this cannot happen. Under "lease" the held run's
transaction keeps its entry's row lock, which takeovers and the purge skip (``SKIP
LOCKED``); under "lock" it keeps the key's advisory lock. A redelivery counts a run only once
it holds the claim (item 5), so it never reads the held run as one that never finished.

What did happen on 0.5: once the server ends the held run's transaction (its handler idle
past ``IDEMPOTENCY_IDLE_TIMEOUT``, or its session terminated) while the handler still runs,
the next delivery rightly finds the run lost and dead-letters the message; the held run,
told it could not commit, answered "retry" (its failure note even restarted the dead
letter's count), so the broker delivered it again and it ran afresh: dead-lettered and
executed. It is now a dead letter too.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db.models.functions import Now

from idempotency_django import signals
from idempotency_django.calls import namespaced
from idempotency_django.consumers import GiveUp
from idempotency_django.consumers.models import ConsumerFailure
from idempotency_django.models import IdempotencyEntry
from idempotency_django.purge import purge
from tests.lock_helpers import backend_alive, query, wait_for, writer_of_charges
from tests.test_consumer_failures import received
from tests.test_consumer_only_runs_count import (
    MESSAGE,
    WITHIN,
    Delivery,
    seen_waiting,
    wait,
)
from tests.testapp.models import Charge

pytestmark = [pytest.mark.requires_server, pytest.mark.django_db(transaction=True)]

LEASE = 0.5  # seconds
POLICY = GiveUp(max_attempts=2, backoff=0.0)


@pytest.fixture(params=[pytest.param("lock", marks=pytest.mark.requires_postgres), "lease"])
def protocol(request: pytest.FixtureRequest, settings: Any) -> str:
    settings.IDEMPOTENCY_PROTOCOL = request.param
    return str(request.param)


class HeldWriting(Delivery):
    """The last attempt: writes its charge, then waits in its handler (its transaction open)."""

    def handler(self) -> dict[str, int]:
        charge = Charge.objects.create(reference=self.name, amount=1)
        self.entered.set()
        assert self.release.wait(WITHIN), f"{self.name}'s handler was never released"
        if self.fails:
            raise RuntimeError(self.name)
        return {"charge": charge.pk}


def lease_passed(chosen: str) -> None:
    """Until the database's clock is past the held run's lease (under ``chosen``)."""
    if chosen == "lease":
        passed = IdempotencyEntry.objects.filter(
            key=namespaced("consumer", MESSAGE), locked_until__lt=Now()
        )
        wait_for(passed.exists, WITHIN, "the held run's lease to pass")
        return
    ((started,),) = query(
        "SELECT xact_start FROM pg_stat_activity WHERE pid = %s", (writer_of_charges(),)
    )
    moment = started + timedelta(seconds=LEASE)
    wait_for(lambda: query("SELECT clock_timestamp() > %s", (moment,))[0][0], WITHIN, "lease")


@pytest.mark.parametrize("redelivery", ["refused", "waits"])
@pytest.mark.parametrize("last_run", ["succeeds", "fails"])
def test_a_last_attempt_past_its_lease_is_never_dead_lettered_while_it_runs(
    protocol: str,
    redelivery: str,
    last_run: str,
    monkeypatch: pytest.MonkeyPatch,
    settings: Any,
) -> None:
    settings.IDEMPOTENCY_LEASE = LEASE
    assert Delivery("before", POLICY, fails=True).start().done().outcome == "failed"
    held = HeldWriting("last", POLICY, fails=last_run == "fails", held=True)
    with received(signals.dead_lettered) as dead:
        held.start()
        wait(held.entered, "the last attempt is running")
        lease_passed(protocol)
        other = Delivery("redelivered", POLICY, fails=False)
        if redelivery == "waits":
            settings.IDEMPOTENCY_WAIT = WITHIN
            with seen_waiting(monkeypatch, other):
                other.start()
            wait(other.waiting, "the redelivery waits for the key")
        else:
            other.start().done()
        swept = purge()
        if protocol == "lease":
            assert IdempotencyEntry.objects.filter(key=namespaced("consumer", MESSAGE)).exists()
        held.release.set()
        last, again = held.done(), other.done()

    assert not other.entered.is_set(), "the redelivery ran while the last attempt still ran"
    assert swept.abandoned == 0
    if redelivery == "refused":
        assert (again.action, again.outcome, again.failures) == ("retry", "in_progress", 0)
    if last_run == "succeeds":
        assert (last.action, last.outcome) == ("ack", "executed")
        assert list(Charge.objects.values_list("reference", flat=True)) == ["last"]
        assert not ConsumerFailure.objects.exists()
        assert dead == []
        if redelivery == "waits":
            assert (again.action, again.outcome) == ("ack", "replayed")
        return
    assert (last.action, last.outcome, last.failures) == ("dead_letter", "exhausted", 2)
    assert not Charge.objects.exists()
    assert list(ConsumerFailure.objects.values_list("failures", flat=True)) == [2]
    assert {(d["attempts"], d["uncertain"]) for d in dead} == {(2, False)}
    if redelivery == "waits":
        # It waited through the last attempt, which gave the message up: a dead letter too,
        # never run (in flight together with it).
        assert (again.action, again.outcome, again.failures) == ("dead_letter", "exhausted", 2)


@pytest.mark.requires_postgres  # IDEMPOTENCY_IDLE_TIMEOUT bounds PostgreSQL's idle transactions
@pytest.mark.parametrize("ended_by", ["idle_timeout", "terminated"])
def test_a_last_attempt_whose_transaction_the_server_ended_is_not_run_again(
    protocol: str, ended_by: str, settings: Any
) -> None:
    """Its handler idle in its transaction past ``IDEMPOTENCY_IDLE_TIMEOUT`` (a slow outside
    call), or its session terminated by an operator: PostgreSQL ends the session, the key is
    free, and the next delivery finds the last attempt lost (``RunsLost``, uncertain: it may
    have reached that outside service). The held run then learns it cannot commit (a failure
    of its record, or the store away): given up on while it ran, it is a dead letter too,
    never a retry (the broker would deliver it again, and it would run afresh)."""
    settings.IDEMPOTENCY_LEASE = LEASE
    settings.IDEMPOTENCY_IDLE_TIMEOUT = 1 if ended_by == "idle_timeout" else 300
    assert Delivery("before", POLICY, fails=True).start().done().outcome == "failed"
    held = HeldWriting("last", POLICY, fails=False, held=True)
    with received(signals.dead_lettered) as dead:
        held.start()
        wait(held.entered, "the last attempt is running")
        pid = wait_for(writer_of_charges, WITHIN, "the last attempt's backend")
        if ended_by == "terminated":
            query("SELECT pg_terminate_backend(%s)", (pid,))
        wait_for(lambda: not backend_alive(pid), WITHIN, "the server to end it")
        if protocol == "lease":
            lease_passed(protocol)
        other = Delivery("redelivered", POLICY, fails=False).start()
        lost = other.done()
        held.release.set()
        last = held.done()

    assert not other.entered.is_set()
    assert (lost.action, lost.outcome, lost.failures) == ("dead_letter", "exhausted", 2)
    assert "never finished" in str(lost.error)
    assert (last.action, last.outcome, last.failures) == ("dead_letter", "exhausted", 2), last
    assert not Charge.objects.exists()
    assert [d["uncertain"] for d in dead] == [True, False]
