"""``idempotent_task`` in-process: options, replay, keys, and what a duplicate in flight does."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from celery import Celery, Signature, Task
from celery import _state as celery_state
from celery.exceptions import Retry

from idempotency_django.celery import idempotent_task
from idempotency_django.exceptions import KeyReused, RequestInProgress
from tests.helpers import charges
from tests.testapp.models import Charge

pytestmark = pytest.mark.versions

app = Celery("idempotency_django_unit", set_as_current=False)
app.conf.task_always_eager = False
runs: list[str] = []


@app.task(bind=True, name="unit.bound")
@idempotent_task
def bound(self: Task[Any, Any], reference: str, amount: int = 1) -> dict[str, Any]:
    runs.append(reference)
    charge = Charge.objects.create(reference=reference, amount=amount)
    return {"id": charge.pk, "task_id": self.request.id}


@app.task(name="unit.by_reference")
@idempotent_task(key=lambda reference: f"order-{reference}", ttl=60)
def by_reference(reference: str) -> str:
    runs.append(reference)
    Charge.objects.create(reference=reference, amount=1)
    return reference


@pytest.fixture(autouse=True)
def _fresh_runs() -> Iterator[None]:
    runs.clear()
    yield
    runs.clear()


def test_misplaced_or_wrong_options_fail_when_decorating() -> None:
    def misplaced() -> None: ...

    with pytest.raises(TypeError, match="between the task decorator and the function"):
        idempotent_task(app.task(name="unit.misplaced")(misplaced))
    with pytest.raises(ValueError, match="on_in_progress"):
        idempotent_task(on_in_progress="wait")  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="callable"):
        idempotent_task(key="order-1")  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="countdown"):
        idempotent_task(countdown=-1)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"countdown": float("nan")}, "countdown"),
        ({"countdown": float("inf")}, "countdown"),
        ({"ttl": -1}, "ttl"),
        ({"ttl": 10**12}, "ttl"),
        ({"ttl": "1d"}, "ttl"),
        ({"wait": -1}, "wait"),
        ({"wait": 30 * 86400}, "wait"),  # PostgreSQL's lock_timeout is int milliseconds
        ({"protocol": "nope"}, "protocol"),
    ],
)
def test_wrong_values_fail_when_decorating(options: dict[str, Any], named: str) -> None:
    with pytest.raises(ValueError, match=rf"idempotent_task\({named}=\.\.\.\)"):
        idempotent_task(**options)


def test_outside_a_task_it_refuses_to_guess() -> None:
    @idempotent_task
    def plain(reference: str) -> str:
        return reference

    with pytest.raises(RuntimeError, match="must run as a Celery task"):
        plain("r1")


@pytest.mark.django_db(transaction=True)
def test_a_finished_duplicate_returns_the_stored_result_without_running() -> None:
    first = bound.apply(args=("r1",), task_id="t-1")
    again = bound.apply(args=("r1",), task_id="t-1")
    assert first.get() == again.get() == {"id": first.get()["id"], "task_id": "t-1"}
    assert runs == ["r1"]
    assert charges("r1") == 1
    other = bound.apply(args=("r1",), task_id="t-2")  # a re-publish: a new id, a new run
    assert other.get()["task_id"] == "t-2"
    assert charges("r1") == 2


@pytest.mark.django_db(transaction=True)
def test_positional_and_keyword_deliveries_of_one_call_fingerprint_alike() -> None:
    first = bound.apply(args=("r9",), task_id="t-9").get()
    assert bound.apply(kwargs={"reference": "r9"}, task_id="t-9").get() == first
    assert bound.apply(args=("r9", 1), task_id="t-9").get() == first
    assert runs == ["r9"]
    other = bound.apply(kwargs={"reference": "r9", "amount": 2}, task_id="t-9")
    assert other.state == "FAILURE"
    assert isinstance(other.result, KeyReused)


@pytest.mark.django_db(transaction=True)
def test_a_business_key_deduplicates_across_task_ids() -> None:
    assert by_reference.apply(args=("r2",), task_id="a").get() == "r2"
    assert by_reference.apply(args=("r2",), task_id="b").get() == "r2"
    assert runs == ["r2"]
    assert charges("r2") == 1


@pytest.mark.django_db(transaction=True)
def test_a_key_callable_returning_none_fails_instead_of_running_unprotected() -> None:
    task = _task(key=lambda reference, amount=0: None)
    result = task.apply(args=("r12",), task_id="t-12")
    assert result.state == "FAILURE"
    assert isinstance(result.result, ValueError)
    assert "non-empty str" in str(result.result)
    assert runs == []


@pytest.mark.django_db(transaction=True)
def test_a_direct_call_is_not_a_delivery_and_runs_every_time() -> None:
    bound("r3")
    bound("r3")
    assert runs == ["r3", "r3"]


class FakeCall:
    """Records what the adapter asks of ``idempotent_call``; raises ``in_progress`` if set."""

    def __init__(self, in_progress: RequestInProgress | None = None) -> None:
        self.in_progress = in_progress
        self.asked: list[tuple[str, dict[str, Any]]] = []

    @contextmanager
    def __call__(self, key: str, **kwargs: Any) -> Iterator[Any]:
        self.asked.append((key, kwargs))
        if self.in_progress:
            raise self.in_progress

        class Call:
            replayed = False
            result: Any = None

        yield Call()


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[Signature[Any]]:
    """The signatures the adapter would have sent to the broker, captured instead."""
    captured: list[Signature[Any]] = []
    monkeypatch.setattr(Signature, "apply_async", lambda sig, *a, **kw: captured.append(sig))
    return captured


@pytest.fixture
def fake_call(monkeypatch: pytest.MonkeyPatch) -> FakeCall:
    fake = FakeCall()
    monkeypatch.setattr("idempotency_django.calls.idempotent_call", fake)
    return fake


def _task(**options: Any) -> Any:
    @app.task(name=f"unit.flight.{len(app.tasks)}", max_retries=3)
    @idempotent_task(**options)
    def flight(reference: str, *, amount: int = 0) -> str:
        runs.append(reference)
        return reference

    return flight


def test_the_call_gets_scope_tenant_arguments_and_options(fake_call: FakeCall) -> None:
    task = _task(tenant=lambda reference, amount: f"acct-{amount}", ttl=30, database="default")
    assert task.apply(args=("r4",), kwargs={"amount": 5}, task_id="t-4").get() == "r4"
    key, asked = fake_call.asked[0]
    assert key == "t-4"
    assert asked["scope"] == task.name
    assert asked["tenant"] == "acct-5"
    assert asked["arguments"] == {"reference": "r4", "amount": 5}
    assert (asked["ttl"], asked["database"], asked["protocol"], asked["wait"]) == (
        30,
        "default",
        None,
        None,
    )


def test_in_flight_retries_after_the_holders_retry_after(
    fake_call: FakeCall, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_call.in_progress = RequestInProgress(retry_after=7)
    task = _task()
    asked: list[dict[str, Any]] = []

    def retry(**kwargs: Any) -> Exception:
        asked.append(kwargs)
        return RuntimeError("retried")

    monkeypatch.setattr(task, "retry", retry)
    result = task.apply(args=("r5",), task_id="t-5")
    assert result.state == "FAILURE"
    assert asked[0]["countdown"] == 7
    assert asked[0]["exc"] is fake_call.in_progress
    task_with_countdown = _task(countdown=2)
    monkeypatch.setattr(task_with_countdown, "retry", retry)
    task_with_countdown.apply(args=("r5",), task_id="t-5")
    assert asked[1]["countdown"] == 2
    assert runs == []


@contextmanager
def delivered(task: Any, **request: Any) -> Iterator[None]:
    """Run ``task.run`` as a worker's delivery (``apply()`` retries at once, in-process)."""
    stack = celery_state._task_stack  # type: ignore[attr-defined]
    stack.push(task)
    task.push_request(called_directly=False, is_eager=False, delivery_info={}, **request)
    try:
        yield
    finally:
        task.pop_request()
        stack.pop()


def test_in_flight_retries_past_max_retries_backing_off_without_spending_them(
    fake_call: FakeCall, sent: list[Signature[Any]], settings: Any
) -> None:
    fake_call.in_progress = RequestInProgress()
    task = _task()  # max_retries=3: a held key outlasts that (a crashed lease, a lost host)
    headers = None
    for _ in range(9):
        with delivered(task, id="t-10", retries=2, headers=headers), pytest.raises(Retry):
            task.run("r10")
        headers = sent[-1].options["headers"]
    assert [sig.options["countdown"] for sig in sent] == [1, 2, 4, 8, 16, 32, 60, 60, 60]
    # The body's own self.retry() budget is untouched by the waits.
    assert {sig.options["retries"] for sig in sent} == {2}
    assert {sig.id for sig in sent} == {"t-10"}
    settings.IDEMPOTENCY_LEASE = 5  # a dead lease frees the key within 5 s: never wait longer
    with delivered(task, id="t-10", headers=headers), pytest.raises(Retry):
        task.run("r10")
    assert sent[-1].options["countdown"] == 5
    fixed = _task(countdown=2)
    with delivered(fixed, id="t-11", headers=headers), pytest.raises(Retry):
        fixed.run("r11")
    assert sent[-1].options["countdown"] == 2
    assert runs == []


def test_a_direct_call_meeting_a_held_key_raises_and_sends_nothing(
    fake_call: FakeCall, sent: list[Signature[Any]]
) -> None:
    fake_call.in_progress = RequestInProgress()
    task = _task(key=lambda reference, amount=0: f"order-{reference}")
    with pytest.raises(RequestInProgress):
        task("r13")  # called as a function: no delivery to re-send
    assert sent == []


def test_the_resent_delivery_leaves_the_brokers_dead_letter_records_behind(
    fake_call: FakeCall, sent: list[Signature[Any]]
) -> None:
    fake_call.in_progress = RequestInProgress()
    task = _task()
    headers = {"x-death": [{"count": 1}], "tenant-hint": "acme"}
    with delivered(task, id="t-14", headers=headers), pytest.raises(Retry):
        task.run("r14")
    assert "x-death" not in sent[0].options["headers"]
    assert sent[0].options["headers"]["tenant-hint"] == "acme"


def test_in_flight_drop_ignores_the_delivery(fake_call: FakeCall) -> None:
    fake_call.in_progress = RequestInProgress()
    result = _task(on_in_progress="drop").apply(args=("r6",), task_id="t-6")
    assert result.state == "IGNORED"
    assert runs == []


def test_in_flight_raise_fails_the_delivery(fake_call: FakeCall) -> None:
    fake_call.in_progress = RequestInProgress()
    result = _task(on_in_progress="raise").apply(args=("r7",), task_id="t-7")
    assert result.state == "FAILURE"
    assert isinstance(result.result, RequestInProgress)
    assert runs == []
