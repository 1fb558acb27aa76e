"""Whose failure it is: the handler's own database errors are failures (counted, then a
dead letter), the store's are retries; a run that takes its process down is counted
before it starts; an id the store cannot hold is a verdict, never an exception."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import OperationalError, connection
from django.test import override_settings

from idempotency_django import signals
from idempotency_django.consumers import GiveUp, consume
from idempotency_django.consumers import core as consumer_core
from idempotency_django.consumers.models import ConsumerFailure
from idempotency_django.exceptions import RequestInProgress
from idempotency_django.models import IdempotencyEntry
from tests.testapp.models import Charge

pytestmark = pytest.mark.django_db
FAST = GiveUp(max_attempts=3, backoff=1.0, backoff_cap=3.0, unavailable_delay=0.5)


class ProcessDied(BaseException):
    """Stands for SIGKILL in-process: nothing after the handler runs (tests/
    test_consumer_contract.py kills a real process)."""


def charge(reference: str) -> dict[str, int]:
    return {"charge": Charge.objects.create(reference=reference, amount=1).pk}


def verdicts(message_id: str, handler: Any, times: int = 3) -> list[tuple[str, str, int]]:
    found = [consume(message_id, handler, policy=FAST) for _ in range(times)]
    return [(v.action, v.outcome, v.failures) for v in found]


COUNTED = [("retry", "failed", 1), ("retry", "failed", 2), ("dead_letter", "exhausted", 3)]


def test_a_handlers_own_operational_error_is_a_failure_counted_then_dead_lettered() -> None:
    def times_out() -> None:
        Charge.objects.create(reference="t", amount=1)
        raise OperationalError("canceling statement due to statement timeout")

    assert verdicts("m", times_out) == COUNTED
    assert not Charge.objects.exists()


@pytest.mark.requires_postgres
def test_a_handlers_statement_timeout_is_a_failure_counted_then_dead_lettered() -> None:
    def slow_query() -> None:
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL statement_timeout = '10ms'")
            cursor.execute("SELECT pg_sleep(5)")

    assert verdicts("slow", slow_query) == COUNTED


@pytest.mark.requires_postgres
@pytest.mark.parametrize("state", ["40P01", "55P03"])  # deadlock_detected, lock_not_available
def test_a_handlers_deadlock_or_lock_timeout_is_a_failure_counted_then_dead_lettered(
    state: str,
) -> None:
    def raises_on_the_server() -> None:
        with connection.cursor() as cursor:
            cursor.execute(f"DO $$ BEGIN RAISE EXCEPTION 'stuck' USING ERRCODE = '{state}'; END $$")

    assert verdicts(state, raises_on_the_server) == COUNTED


@pytest.mark.requires_postgres
@pytest.mark.django_db(transaction=True)  # the connection really goes
def test_the_connection_lost_inside_the_handler_is_a_retry_never_a_failure() -> None:
    def connection_killed() -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")

    for _ in range(4):
        verdict = consume("gone", connection_killed, policy=FAST)
        assert (verdict.action, verdict.outcome) == ("retry", "unavailable")
    assert consume("gone", lambda: charge("gone"), policy=FAST).outcome == "executed"
    assert not ConsumerFailure.objects.exists()


def test_a_database_error_recording_the_result_is_the_store_unavailable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from idempotency_django._protocol.execution import Run

    def away(*args: Any, **kwargs: Any) -> None:
        raise OperationalError("canceling statement due to statement timeout")

    monkeypatch.setattr(Run, "record", away)
    for _ in range(4):
        verdict = consume("m", lambda: charge("m"), policy=FAST)
        assert (verdict.action, verdict.outcome) == ("retry", "unavailable")
    assert not ConsumerFailure.objects.filter(failures__gt=0).exists()


def test_a_tasks_own_operational_error_counts_toward_max_attempts() -> None:
    from idempotency_django.consumers.classify import handler_errors
    from idempotency_django.consumers.core import task_failed

    options: dict[str, Any] = {"scope": "t", "key": "k", "tenant": "", "database": None}
    with pytest.raises(OperationalError) as raised, handler_errors():
        raise OperationalError("deadlock detected")
    assert task_failed(raised.value, max_attempts=2, **options) is False
    assert task_failed(raised.value, max_attempts=2, **options) is True
    # The same error met claiming or committing (unmarked) is the store away: never counted.
    assert task_failed(OperationalError("deadlock detected"), max_attempts=1, **options) is False


@pytest.mark.django_db(transaction=True)  # as the docs ask: outside a transaction of one's own
def test_a_run_that_takes_its_process_down_is_counted_and_then_dead_lettered_unrun() -> None:
    runs: list[str] = []

    def dies() -> None:
        runs.append("ran")
        raise ProcessDied()

    for _ in range(FAST.max_attempts):
        with pytest.raises(ProcessDied):
            consume("oom", dies, policy=FAST)
    with received(signals.dead_lettered) as dead:
        verdict = consume("oom", dies, policy=FAST)
    assert (verdict.action, verdict.outcome, verdict.failures) == ("dead_letter", "exhausted", 3)
    assert "never finished" in str(verdict.error)
    assert len(runs) == FAST.max_attempts
    assert [d["attempts"] for d in dead] == [3]
    # Its key is free, its count a dead letter (the admin's): the fixed message runs.
    row = ConsumerFailure.objects.get()
    assert (row.failures, row.dead_at is not None) == (3, True)
    assert "never finished" in row.last_error
    assert consume("oom", lambda: charge("oom"), policy=FAST).outcome == "executed"
    assert not ConsumerFailure.objects.exists()


def test_a_delivery_that_finds_its_message_done_or_busy_is_not_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    consume("done", lambda: charge("done"))
    for _ in range(FAST.max_attempts + 2):
        assert consume("done", lambda: charge("done"), policy=FAST).outcome == "replayed"
    assert not ConsumerFailure.objects.exists()

    @contextmanager
    def held(*args: Any, **kwargs: Any) -> Iterator[None]:
        raise RequestInProgress(retry_after=1)
        yield

    monkeypatch.setattr(consumer_core, "idempotent_call", held)
    for _ in range(FAST.max_attempts + 2):
        assert consume("busy", lambda: charge("busy"), policy=FAST).outcome == "in_progress"
    assert not ConsumerFailure.objects.exists()


@pytest.mark.parametrize(
    "message_id",
    ["x" * 300, "nul\x00byte", "", "lone-\udc80", "lone-\ud800-high"],
    ids=["long", "nul", "empty", "low-surrogate", "high-surrogate"],
)
def test_an_id_the_store_cannot_hold_is_a_dead_letter_not_an_exception(message_id: str) -> None:
    with received(signals.dead_lettered) as dead:
        verdict = consume(message_id, lambda: charge("never"), policy=FAST)
    assert (verdict.action, verdict.outcome) == ("dead_letter", "unstorable")
    assert isinstance(verdict.error, ValueError)
    assert [d["sender"] for d in dead] == ["consumer"]
    assert not Charge.objects.exists()
    assert not IdempotencyEntry.objects.exists()
    assert consume("healthy", lambda: charge("healthy")).outcome == "executed"


@pytest.mark.parametrize("tenant", ["t" * 300, "lone-\udc80"], ids=["long", "surrogate"])
def test_a_tenant_the_store_cannot_hold_is_a_dead_letter_too(tenant: str) -> None:
    verdict = consume("m", lambda: charge("m"), tenant=tenant)
    assert (verdict.action, verdict.outcome) == ("dead_letter", "unstorable")
    assert not Charge.objects.exists()


def test_a_wrong_scope_is_still_the_programmers_error() -> None:
    with pytest.raises(ValueError, match="scope"):
        consume("m", lambda: charge("m"), scope="")


def test_consume_without_the_consumers_app_names_what_to_add() -> None:
    from django.conf import settings

    apps = [app for app in settings.INSTALLED_APPS if app != "idempotency_django.consumers"]
    with (
        override_settings(INSTALLED_APPS=apps),
        pytest.raises(ImproperlyConfigured, match=r"idempotency_django\.consumers.*INSTALLED_APPS"),
    ):
        consume("m", lambda: charge("m"))
    # The broker's own count needs no table.
    with override_settings(INSTALLED_APPS=apps):
        assert consume("n", lambda: charge("n"), attempt=1).outcome == "executed"


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


def test_a_celery_and_a_django_task_count_their_own_statement_timeouts_to_max_attempts() -> None:
    from celery.exceptions import Reject

    from tests.test_task_give_up import broken, celery_charge, django_charge

    timeout = OperationalError("canceling statement due to statement timeout")
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(broken, "yes", False)
        patch.setattr(Charge.objects, "create", lambda **kwargs: _raise(timeout))
        errors = [celery_charge.apply(args=("r1",), task_id="t-1").result for _ in range(3)]
        assert [type(error) for error in errors] == [OperationalError, OperationalError, Reject]
        with received(signals.dead_lettered) as dead:
            for _ in range(2):
                with pytest.raises(OperationalError):
                    django_charge.call("r2")
        assert [(d["sender"], d["attempts"]) for d in dead] == [("task", 2)]


def _raise(error: BaseException) -> None:
    raise error


# --- the store away around the handler: retried or logged, never raised -------------------------


@pytest.mark.parametrize("step", ["seen_dead", "started"])  # as it arrives, once it holds it
def test_the_store_away_counting_a_delivery_is_a_retry_and_the_handler_does_not_run(
    monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    from idempotency_django.consumers import failures

    monkeypatch.setattr(failures, step, lambda *args: _raise(OperationalError("gone")))
    verdict = consume("m", lambda: charge("m"), policy=FAST)
    assert (verdict.action, verdict.outcome) == ("retry", "unavailable")
    assert verdict.delay == FAST.unavailable_delay
    assert not Charge.objects.exists()


def test_the_store_error_recording_an_answer_rolls_back_the_handler_and_retries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from idempotency_django._protocol import execution
    from idempotency_django._storage.store import readonly

    lost = OperationalError("server closed the connection unexpectedly")
    monkeypatch.setattr(execution, "record_answer", lambda *args: _raise(lost))
    monkeypatch.setattr(readonly, "record", lambda *args: _raise(lost))
    verdict = consume("m", lambda: charge("m"), policy=FAST)
    assert (verdict.action, verdict.outcome) == ("retry", "unavailable")
    assert verdict.error is lost  # not taken for the packet limit's AnswerTooLarge
    assert not Charge.objects.exists()


def test_a_replay_with_the_brokers_own_count_touches_no_failure_count() -> None:
    assert consume("n", lambda: charge("n"), attempt=1).outcome == "executed"
    verdict = consume("n", lambda: charge("again"), attempt=2)
    assert (verdict.action, verdict.outcome) == ("ack", "replayed")
    assert verdict.result == {"charge": Charge.objects.get(reference="n").pk}
    assert not ConsumerFailure.objects.exists()


def test_a_replay_touches_no_count(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from idempotency_django.consumers import failures

    assert consume("done", lambda: charge("done"), policy=FAST).outcome == "executed"
    for name in ("started", "forget", "uncount", "count"):
        monkeypatch.setattr(failures, name, lambda *args: _raise(OperationalError("gone")))
    verdict = consume("done", lambda: charge("again"), policy=FAST)
    assert (verdict.action, verdict.outcome) == ("ack", "replayed")
    assert "count" not in caplog.text
    assert list(Charge.objects.values_list("reference", flat=True)) == ["done"]


def test_a_dead_letter_whose_count_cannot_be_marked_is_still_a_dead_letter(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from idempotency_django.consumers import failures

    def fails() -> None:
        raise ValueError("bad payload")

    for _ in range(FAST.max_attempts - 1):
        assert consume("bad", fails, policy=FAST).action == "retry"
    monkeypatch.setattr(failures, "gave_up", lambda *args: _raise(OperationalError("gone")))
    with received(signals.dead_lettered) as dead:
        verdict = consume("bad", fails, policy=FAST)
    assert (verdict.action, verdict.outcome) == ("dead_letter", "exhausted")
    assert [d["attempts"] for d in dead] == [FAST.max_attempts]
    assert "could not mark the failure count of a dead letter" in caplog.text


@pytest.mark.parametrize("message_id", [42, None, b"bytes"])
def test_a_message_id_that_is_not_a_str_is_the_programmers_error(message_id: Any) -> None:
    with pytest.raises(TypeError, match="takes the message id as a str"):
        consume(message_id, lambda: charge("never"))
    assert not Charge.objects.exists()


# --- counted by the run holding the claim (tests/test_consumer_only_runs_count.py races it) ------


@pytest.mark.requires_server  # SQLite notes it after the rollback anyway (one writer)
@pytest.mark.django_db(transaction=True)  # the claim's transaction is consume()'s own
def test_a_failure_the_run_could_not_note_is_counted_after_its_rollback(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from idempotency_django.consumers import failures

    real, calls = failures.count, []

    def away_once(*args: Any, **kwargs: Any) -> tuple[int, float]:
        calls.append(args)
        if len(calls) == 1:
            raise OperationalError("the connection noting the failure went away")
        return real(*args, **kwargs)

    def fails() -> None:
        raise ValueError("bad payload")

    monkeypatch.setattr(failures, "count", away_once)
    verdict = consume("bad", fails, policy=FAST)
    assert (verdict.action, verdict.outcome, verdict.failures) == ("retry", "failed", 1)
    assert "could not note a failure while holding it" in caplog.text
    assert len(calls) == 2
    assert list(ConsumerFailure.objects.values_list("failures", flat=True)) == [1]


def test_a_run_whose_claim_is_taken_over_before_it_begins_takes_its_count_back(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from idempotency_django._storage.store import lease
    from idempotency_django.consumers import failures

    def fails() -> None:
        raise ValueError("bad payload")

    assert consume("m", fails, policy=FAST, protocol="lease").failures == 1
    monkeypatch.setattr(lease, "hold", lambda *args: False)  # its lease passed before its lock
    verdict = consume("m", lambda: charge("m"), policy=FAST, protocol="lease")
    assert (verdict.action, verdict.outcome) == ("retry", "in_progress")
    assert list(ConsumerFailure.objects.values_list("failures", flat=True)) == [1]
    assert consume("n", lambda: charge("n"), policy=FAST, protocol="lease").action == "retry"
    assert not ConsumerFailure.objects.filter(key__endswith="n").exists()
    assert not Charge.objects.exists()
    # The store away as it takes the count back: logged, still a retry.
    monkeypatch.setattr(failures, "uncount", lambda *args: _raise(OperationalError("gone")))
    assert consume("o", lambda: charge("o"), policy=FAST, protocol="lease").action == "retry"
    assert "could not take back a delivery's count" in caplog.text


def test_a_count_whose_row_vanished_before_it_was_counted_counts_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from django.db import IntegrityError
    from django.db.models import QuerySet

    from idempotency_django.consumers import failures

    # Its INSERT met a row that the purge then deleted before the UPDATE.
    monkeypatch.setattr(QuerySet, "create", lambda *a, **k: _raise(IntegrityError()))
    assert failures.started("default", "", "consumer\x1fm", None) == 1


@pytest.mark.django_db(transaction=True)  # its count outlives its rollback (not a caller's)
def test_a_run_given_up_on_by_another_delivery_before_its_failure_is_counted_is_dead_lettered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from idempotency_django.consumers import failures

    real = failures.count

    def lost_meanwhile(using: str, tenant: str, key: str, *args: Any, **kw: Any) -> Any:
        # Its claim lost (the server ended its transaction), another delivery gave up first.
        failures.gave_up(using, tenant, key, 3, RuntimeError("lost"))
        return real(using, tenant, key, *args, **kw)

    def fails() -> None:
        raise ValueError("bad payload")

    monkeypatch.setattr(failures, "count", lost_meanwhile)
    verdict = consume("m", fails, policy=FAST)
    assert (verdict.action, verdict.outcome, verdict.failures) == ("dead_letter", "exhausted", 3)
    assert list(ConsumerFailure.objects.values_list("failures", "last_error")) == [
        (3, "RuntimeError('lost')")
    ]


@pytest.mark.parametrize("asking", ["answers", "away"])
def test_a_dead_letter_sent_again_whose_store_goes_away_is_a_retry(
    monkeypatch: pytest.MonkeyPatch, asking: str
) -> None:
    from idempotency_django._protocol.execution import Run
    from idempotency_django.consumers import failures

    def fails() -> None:
        raise ValueError("bad payload")

    for _ in range(FAST.max_attempts):
        consume("m", fails, policy=FAST)
    assert ConsumerFailure.objects.get().dead_at is not None
    monkeypatch.setattr(Run, "record", lambda *a, **k: _raise(OperationalError("gone")))
    if asking == "away":
        monkeypatch.setattr(failures, "given_up_since", lambda *a: _raise(OperationalError("x")))
    # Sent again, it starts afresh; its store away, it is given up on by no one since: a retry.
    verdict = consume("m", lambda: charge("m"), policy=FAST)
    assert (verdict.action, verdict.outcome) == ("retry", "unavailable")
    assert not Charge.objects.exists()
