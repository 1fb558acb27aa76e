"""``idempotent_task(max_attempts=N)`` (Celery and django.tasks): a body that keeps failing
is given up on after N failures, counted durably: a dead letter (signal, log; Celery
rejects it without requeue, to the broker's dead-letter exchange), its key left free."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import django
import pytest
from celery import Celery, Task
from celery.exceptions import Reject

from idempotency_django import signals
from idempotency_django.celery import idempotent_task as celery_task
from idempotency_django.consumers.models import ConsumerFailure
from idempotency_django.django_tasks import idempotent_task as django_task
from idempotency_django.models import IdempotencyEntry
from tests.testapp.models import Charge

if django.VERSION >= (6, 0):
    from django.tasks import task
else:
    from django_tasks import task  # type: ignore[no-redef]

pytestmark = pytest.mark.django_db
app = Celery("idempotency_django_give_up", set_as_current=False)
app.conf.task_always_eager = False
broken = {"yes": True}


class Broken(Exception):
    pass


def _charge(reference: str) -> str:
    if broken["yes"]:
        raise Broken(reference)
    Charge.objects.create(reference=reference, amount=1)
    return reference


@app.task(bind=True, name="give_up.charge", acks_late=True)
@celery_task(max_attempts=3)
def celery_charge(self: Task[Any, Any], reference: str) -> str:
    return _charge(reference)


@task()
@django_task(key=lambda reference: f"charge-{reference}", max_attempts=2)
def django_charge(reference: str) -> str:
    return _charge(reference)


@pytest.fixture(autouse=True)
def broken_body() -> Iterator[list[dict[str, Any]]]:
    broken["yes"] = True
    seen: list[dict[str, Any]] = []

    def receiver(sender: str, **kwargs: Any) -> None:
        seen.append({"sender": sender, **kwargs})

    signals.dead_lettered.connect(receiver)
    yield seen
    signals.dead_lettered.disconnect(receiver)


def test_a_celery_task_is_rejected_without_requeue_after_max_attempts(
    broken_body: list[dict[str, Any]],
) -> None:
    errors = [celery_charge.apply(args=("r1",), task_id="t-1").result for _ in range(3)]
    assert [type(error) for error in errors] == [Broken, Broken, Reject]
    assert isinstance(errors[-1], Reject)
    assert errors[-1].requeue is False  # type: ignore[attr-defined]
    assert [(d["sender"], d["attempts"]) for d in broken_body] == [("task", 3)]
    assert not ConsumerFailure.objects.exists()
    assert not IdempotencyEntry.objects.exists()  # its key is free
    broken["yes"] = False  # fixed and sent again: it runs, once
    assert celery_charge.apply(args=("r1",), task_id="t-1").result == "r1"
    assert celery_charge.apply(args=("r1",), task_id="t-1").result == "r1"
    assert Charge.objects.filter(reference="r1").count() == 1


def test_a_success_forgets_the_failures() -> None:
    celery_charge.apply(args=("r2",), task_id="t-2")
    assert ConsumerFailure.objects.get().failures == 1
    broken["yes"] = False
    celery_charge.apply(args=("r2",), task_id="t-2")
    assert not ConsumerFailure.objects.exists()


def test_a_django_task_is_dead_lettered_after_max_attempts(
    broken_body: list[dict[str, Any]],
) -> None:
    for _ in range(2):
        result = django_charge.enqueue("r3")
        assert result.status == "FAILED"
    assert [(d["sender"], d["attempts"]) for d in broken_body] == [("task", 2)]
    assert not ConsumerFailure.objects.exists()
    broken["yes"] = False
    assert django_charge.enqueue("r3").return_value == "r3"
    assert not ConsumerFailure.objects.exists()


@pytest.mark.parametrize("value", [0, -1, True, 1.5])
def test_a_wrong_max_attempts_fails_when_decorating(value: object) -> None:
    with pytest.raises(ValueError, match="max_attempts"):
        celery_task(max_attempts=value)  # type: ignore[call-overload]


ran: list[str] = []


@app.task(bind=True, name="give_up.on_order", acks_late=True)
def on_order(self: Task[Any, Any], event_id: str) -> Any:
    from idempotency_django.consumers import GiveUp
    from idempotency_django.consumers import celery as preset

    def work() -> str:
        ran.append(event_id)
        return _charge(event_id)

    return preset.handle(self, event_id, work, policy=GiveUp(max_attempts=3, backoff=0))


def test_the_celery_preset_retries_then_dead_letters_a_poison_message(
    broken_body: list[dict[str, Any]],
) -> None:
    ran.clear()
    # Under apply() a retry runs again at once: one call shows the whole life.
    assert isinstance(on_order.apply(args=("o1",), task_id="t-o1").result, Reject)
    assert ran == ["o1", "o1", "o1"]
    assert [(d["sender"], d["attempts"]) for d in broken_body] == [("consumer", 3)]
    broken["yes"] = False
    assert on_order.apply(args=("o1",), task_id="t-o1").result == "o1"
    assert on_order.apply(args=("o1",), task_id="t-o2").result == "o1"  # replayed
    assert ran == ["o1", "o1", "o1", "o1"]
