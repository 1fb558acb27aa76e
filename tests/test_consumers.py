"""``consume()``'s verdicts: one table for every broker (idempotency_django.consumers)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import OperationalError, connections

from idempotency_django import consumers, signals
from idempotency_django.consumers import GiveUp, Verdict, aconsume, consume, current_call
from idempotency_django.consumers import core as consumer_core
from idempotency_django.consumers.models import ConsumerFailure
from idempotency_django.exceptions import RequestInProgress, StoreUnavailable
from idempotency_django.models import IdempotencyEntry
from tests.testapp.models import Charge

pytestmark = pytest.mark.django_db
FAST = GiveUp(max_attempts=3, backoff=1.0, backoff_cap=3.0, unavailable_delay=0.5)


class Poison(Exception):
    pass


def charge(reference: str, amount: int = 1) -> dict[str, int]:
    return {"charge": Charge.objects.create(reference=reference, amount=amount).pk}


def poison() -> None:
    Charge.objects.create(reference="poison", amount=1)  # rolled back with the failure
    raise Poison("cannot be processed")


@contextmanager
def received(signal: Any) -> Iterator[list[dict[str, Any]]]:
    seen: list[dict[str, Any]] = []

    def receiver(sender: str, **kwargs: Any) -> None:
        seen.append({"sender": sender, **kwargs})

    signal.connect(receiver)
    try:
        yield seen
    finally:
        signal.disconnect(receiver)


def test_executed_then_replayed_are_acked_and_the_handler_runs_once() -> None:
    first = consume("m1", lambda: charge("m1"))
    again = consume("m1", lambda: charge("m1"))
    assert (first.action, first.outcome, again.action, again.outcome) == (
        "ack",
        "executed",
        "ack",
        "replayed",
    )
    assert again.result == first.result
    assert Charge.objects.filter(reference="m1").count() == 1


def test_message_ids_are_per_tenant_and_per_scope() -> None:
    for tenant, scope in (("a", "consumer"), ("b", "consumer"), ("a", "other")):
        assert consume("m", lambda: charge("m"), tenant=tenant, scope=scope).outcome == "executed"
    assert Charge.objects.filter(reference="m").count() == 3


def test_a_failing_handler_is_retried_with_backoff_then_dead_lettered() -> None:
    verdicts = [consume("p", poison, policy=FAST) for _ in range(3)]
    assert [(v.action, v.delay, v.failures) for v in verdicts] == [
        ("retry", 1.0, 1),
        ("retry", 2.0, 2),
        ("dead_letter", 0.0, 3),
    ]
    assert isinstance(verdicts[-1].error, Poison)
    assert verdicts[-1].outcome == "exhausted"
    # Its key is free; its count kept as a dead letter (the admin's): sent again (fixed),
    # it runs, once, and the row goes.
    assert not IdempotencyEntry.objects.exists()
    dead = ConsumerFailure.objects.get()
    assert (dead.failures, dead.dead_at is not None) == (3, True)
    assert "cannot be processed" in dead.last_error
    assert not Charge.objects.filter(reference="poison").exists()
    assert consume("p", lambda: charge("p"), policy=FAST).outcome == "executed"
    assert not ConsumerFailure.objects.exists()


def test_a_dead_letter_sent_again_starts_its_count_afresh() -> None:
    for _ in range(3):
        consume("p", poison, policy=FAST)
    again = consume("p", poison, policy=FAST)
    assert (again.action, again.failures) == ("retry", 1)
    assert ConsumerFailure.objects.get().dead_at is None


def test_the_backoff_is_capped() -> None:
    assert [GiveUp(backoff=1, backoff_cap=5).delay(n) for n in (1, 2, 3, 4, 40)] == [
        1.0,
        2.0,
        4.0,
        5.0,
        5.0,
    ]


def test_a_success_after_failures_forgets_them() -> None:
    consume("m", poison, policy=FAST)
    assert ConsumerFailure.objects.get().failures == 1
    assert consume("m", lambda: charge("m"), policy=FAST).action == "ack"
    assert not ConsumerFailure.objects.exists()


def test_the_broker_count_replaces_the_table() -> None:
    assert consume("m", poison, policy=FAST, attempt=2).action == "retry"
    assert consume("m", poison, policy=FAST, attempt=3).action == "dead_letter"
    assert not ConsumerFailure.objects.exists()


def test_a_deadline_gives_up_on_a_message_failing_for_too_long() -> None:
    rules = GiveUp(max_attempts=100, deadline=timedelta(minutes=5))
    assert consume("m", poison, policy=rules).action == "retry"
    ConsumerFailure.objects.update(first_failed_at="2000-01-01T00:00:00Z")
    assert consume("m", poison, policy=rules).action == "dead_letter"


def test_the_dead_letter_is_signalled_and_uncertain_when_a_key_was_derived(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def calls_a_provider() -> None:
        current_call().derive("stripe")  # then: stripe.charge(idempotency_key=...)
        raise Poison("the provider timed out")

    with received(signals.dead_lettered) as dead, received(signals.outcome_uncertain) as unsure:
        consume("quiet", poison, policy=GiveUp(max_attempts=1))
        with caplog.at_level(logging.WARNING, "idempotency_django"):
            consume("loud", calls_a_provider, policy=GiveUp(max_attempts=1))
    assert [(d["sender"], d["attempts"], d["uncertain"]) for d in dead] == [
        ("consumer", 1, False),
        ("consumer", 1, True),
    ]
    digest = signals.key_digest("", "consumer\x1floud")
    assert [(u["how"], u["key_digest"]) for u in unsure] == [("dead_letter", digest)]
    assert f"uncertain outcome (dead_letter) on 'default': 1 execution(s) [key {digest}]" in (
        caplog.text
    )


def test_the_database_failing_inside_the_handler_is_a_retry_never_a_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from idempotency_django.consumers import classify

    # The connection no longer answers (tests/test_consumer_failures.py cuts a real one).
    monkeypatch.setattr(classify, "_answers", lambda using: False)

    def outage() -> None:
        raise OperationalError("server closed the connection unexpectedly")

    for _ in range(5):
        verdict = consume("m", outage, policy=FAST)
        assert (verdict.action, verdict.outcome, verdict.delay) == ("retry", "unavailable", 0.5)
    assert not ConsumerFailure.objects.exists()


def test_an_unreachable_store_is_a_retry(monkeypatch: pytest.MonkeyPatch) -> None:
    @contextmanager
    def unreachable(*args: Any, **kwargs: Any) -> Iterator[None]:
        raise StoreUnavailable()
        yield

    monkeypatch.setattr(consumer_core, "idempotent_call", unreachable)
    verdict = consume("m", lambda: charge("m"), policy=FAST)
    assert (verdict.action, verdict.outcome) == ("retry", "unavailable")


def test_the_failure_count_unreachable_is_a_retry(monkeypatch: pytest.MonkeyPatch) -> None:
    from idempotency_django.consumers import failures

    def away(*args: Any, **kwargs: Any) -> None:
        raise OperationalError("gone")

    monkeypatch.setattr(failures, "count", away)
    assert consume("m", poison, policy=FAST).outcome == "unavailable"
    monkeypatch.setattr(failures, "forget", away)
    assert consume("n", poison, policy=GiveUp(max_attempts=1), attempt=None).action == "retry"


def test_a_dead_letter_whose_count_cannot_be_cleared_is_still_a_dead_letter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from idempotency_django.consumers import failures

    def away(*args: Any) -> None:
        raise OperationalError("gone")

    monkeypatch.setattr(failures, "forget", away)
    assert consume("m", poison, policy=GiveUp(max_attempts=1)).action == "dead_letter"


def test_a_task_failing_on_the_database_is_never_counted() -> None:
    from idempotency_django.consumers.core import task_failed

    gone = OperationalError("gone")
    options: dict[str, Any] = {"scope": "t", "key": "k", "tenant": "", "database": None}
    assert task_failed(gone, max_attempts=1, **options) is False
    assert not ConsumerFailure.objects.exists()


def test_held_by_another_is_a_retry_after_its_retry_after(monkeypatch: pytest.MonkeyPatch) -> None:
    @contextmanager
    def held(*args: Any, **kwargs: Any) -> Iterator[None]:
        raise RequestInProgress(retry_after=7)
        yield

    monkeypatch.setattr(consumer_core, "idempotent_call", held)
    verdict = consume("m", lambda: charge("m"))
    assert (verdict.action, verdict.delay, verdict.outcome) == ("retry", 7.0, "in_progress")


def test_two_first_failures_at_once_count_two(monkeypatch: pytest.MonkeyPatch) -> None:
    from django.db.models import QuerySet

    from idempotency_django.consumers import failures

    # Another consumer's first failure lands between our update (none yet) and our insert.
    ConsumerFailure.objects.create(key="consumer\x1fm", failures=1)
    real_update, calls = QuerySet.update, []

    def first_finds_none(self: QuerySet[Any], **fields: Any) -> int:
        if "dead_at" not in fields:  # the count's own update (not a dead letter's restart)
            calls.append(fields)
            if len(calls) == 1:
                return 0
        return real_update(self, **fields)

    monkeypatch.setattr(QuerySet, "update", first_finds_none)
    assert failures.count("default", "", "consumer\x1fm", Poison())[0] == 2


@pytest.mark.django_db(transaction=True)  # the thread's connection commits for real
def test_aconsume_runs_the_handler_in_a_thread() -> None:
    verdict = asyncio.run(aconsume("m", lambda: charge("m")))
    asyncio.run(sync_to_async(connections.close_all)())  # the ORM thread's, left open
    assert verdict == Verdict("ack", outcome="executed", result=verdict.result)


def test_current_call_outside_a_handler_is_refused() -> None:
    with pytest.raises(RuntimeError, match="consume"):
        current_call()


@pytest.mark.parametrize(
    "options",
    [
        {"max_attempts": 0},
        {"max_attempts": True},
        {"max_attempts": 2.0},
        {"backoff": -1},
        {"deadline": 0},
    ],
)
def test_a_wrong_policy_is_refused_when_made(options: dict[str, Any]) -> None:
    with pytest.raises((TypeError, ValueError)):
        GiveUp(**options)


def test_the_package_names_its_exports() -> None:
    assert consumers.consume is consume
    with pytest.raises(AttributeError):
        consumers.nothing  # noqa: B018
    assert str(ConsumerFailure(key="k", failures=2)) == "'k': 2 failure(s)"


def test_the_purge_deletes_counts_not_seen_for_the_ttl() -> None:
    from idempotency_django import purge

    for key in ("old-1", "old-2", "old-3"):
        consume(key, poison, policy=FAST)
    consume("fresh", poison, policy=FAST)
    ConsumerFailure.objects.exclude(key__endswith="fresh").update(
        first_failed_at="2000-01-01T00:00:00Z"
    )
    from idempotency_django.consumers.failures import purge_stale

    assert purge_stale("default", batch_size=2) == 3
    assert [row.key for row in ConsumerFailure.objects.all()] == ["consumer\x1ffresh"]
    ConsumerFailure.objects.update(first_failed_at="2000-01-01T00:00:00Z")
    purge.purge()  # the entries' purge runs this step too
    assert not ConsumerFailure.objects.exists()
