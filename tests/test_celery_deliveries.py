"""What a Celery delivery of an idempotent task does when its work cannot finish: a busy inner
call fails the task (never drops it), a store outage sends the delivery again, and a replay
returns exactly what the first run returned."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from celery import Celery, Signature, Task
from celery import _state as celery_state
from celery.exceptions import Retry
from django.test import override_settings

from idempotency_django._protocol.fingerprint import (
    arguments_digest,
    bound_arguments,
    keyed,
    signature_of,
)
from idempotency_django.calls import idempotent_call, idempotent_function, namespaced
from idempotency_django.celery import idempotent_task
from idempotency_django.exceptions import NestedRefusal, RequestInProgress, StoreUnavailable
from tests.factories import IdempotencyEntryFactory
from tests.testapp.models import Charge

app = Celery("idempotency_django_review", set_as_current=False)
app.conf.task_always_eager = False
runs: list[str] = []


@idempotent_function(key=lambda order: f"inner-{order}", scope="review.inner")
def inner(order: str) -> str:
    return order


@app.task(name="review.outer_drop")
@idempotent_task(key=lambda order: f"outer-{order}", on_in_progress="drop")
def outer_drop(order: str) -> str:
    runs.append(order)
    Charge.objects.create(reference=f"outer-{order}", amount=1)
    return inner(order)


def _hold_inner(order: str) -> None:
    """An inner call of ``order`` in flight elsewhere (its lease running)."""
    shape = signature_of(inner.__wrapped__)  # type: ignore[attr-defined]
    fingerprint = keyed(arguments_digest(bound_arguments(shape, (order,), {}))).current
    key = namespaced("review.inner", f"inner-{order}")
    IdempotencyEntryFactory(in_progress=True, key=key, fingerprint=fingerprint)


@pytest.fixture(autouse=True)
def _fresh_runs() -> Iterator[None]:
    runs.clear()
    yield
    runs.clear()


@pytest.mark.django_db(transaction=True)
@override_settings(IDEMPOTENCY_PROTOCOL="lease")
def test_a_busy_inner_call_fails_the_task_instead_of_dropping_it() -> None:
    _hold_inner("o1")
    result = outer_drop.apply(args=("o1",), task_id="t-o1")
    # 0.2.0: IGNORED (the delivery dropped as if the task's own key were held).
    assert result.state == "FAILURE"
    assert isinstance(result.result, NestedRefusal)
    assert isinstance(result.result.error, RequestInProgress)
    assert Charge.objects.filter(reference="outer-o1").count() == 0  # rolled back
    # The outer key was freed: once the inner holder is gone the task runs.
    IdempotencyEntryFactory._meta.model.objects.filter(key__contains="inner-o1").delete()
    assert outer_drop.apply(args=("o1",), task_id="t-o1").get() == "o1"


@pytest.mark.django_db(transaction=True)
@override_settings(IDEMPOTENCY_PROTOCOL="lease")
def test_an_inner_refusal_in_a_call_body_is_not_the_calls_own() -> None:
    _hold_inner("o2")
    with (
        pytest.raises(NestedRefusal) as caught,
        idempotent_call("o2", scope="review.outer") as call,
    ):
        call.result = inner("o2")
    assert isinstance(caught.value.error, RequestInProgress)
    with idempotent_call("o2", scope="review.outer") as call:  # the outer key was freed
        assert not call.replayed


@contextmanager
def _delivered(task: Any, **request: Any) -> Iterator[None]:
    stack = celery_state._task_stack  # type: ignore[attr-defined]
    stack.push(task)
    task.push_request(called_directly=False, is_eager=False, delivery_info={}, **request)
    try:
        yield
    finally:
        task.pop_request()
        stack.pop()


@app.task(name="review.stored", max_retries=0)
@idempotent_task(key=lambda order: f"stored-{order}", on_in_progress="drop")
def stored(order: str) -> str:
    runs.append(order)
    return order


def test_a_store_outage_sends_the_delivery_again(monkeypatch: pytest.MonkeyPatch) -> None:
    @contextmanager
    def unreachable(key: str, **kwargs: Any) -> Iterator[Any]:
        raise StoreUnavailable()
        yield  # pragma: no cover

    monkeypatch.setattr("idempotency_django.calls.idempotent_call", unreachable)
    sent: list[Signature[Any]] = []
    monkeypatch.setattr(Signature, "apply_async", lambda sig, *a, **kw: sent.append(sig))
    headers = None
    for _ in range(3):  # max_retries=0: the waits don't spend the body's retries
        with _delivered(stored, id="t-s1", retries=0, headers=headers), pytest.raises(Retry):
            stored.run("s1")
        headers = sent[-1].options["headers"]
    assert [sig.options["countdown"] for sig in sent] == [5, 5, 5]
    assert {sig.id for sig in sent} == {"t-s1"}
    assert runs == []
    with pytest.raises(StoreUnavailable):
        stored("s1")  # called as a function: nothing to send again


def _real_outage_task() -> Task[Any, Any]:
    return stored


@pytest.mark.parametrize(
    "result",
    [
        {"__idempotency_type__": "uuid", "value": "not-a-uuid"},
        {"__idempotency_type__": "dict", "value": [[1, 2]]},
        {1: "one", 2.5: "x", None: [1, {3: 4}], False: "f"},
        {"nested": {7: {"__idempotency_type__": "date", "value": "x"}}},
        [{1: 2}, ({"a": 1},)],
    ],
)
@pytest.mark.django_db(transaction=True)
def test_a_replay_returns_what_the_first_run_returned(result: Any) -> None:
    with idempotent_call("r9", scope="review.results") as call:
        call.result = result
    with idempotent_call("r9", scope="review.results") as again:
        assert again.replayed
    expected = [[{1: 2}, [{"a": 1}]]] if isinstance(result, list) else [result]
    assert [again.result] == expected


@pytest.mark.django_db(transaction=True)
def test_a_result_that_cannot_come_back_is_refused_at_the_first_return() -> None:
    with (
        pytest.raises(TypeError, match="tuple"),
        idempotent_call("r9b", scope="review.results") as call,
    ):
        call.result = {(1, 2): "pair"}
    with idempotent_call("r9b", scope="review.results") as call:
        assert not call.replayed  # nothing was stored
