"""The outbox with ``django.tasks`` tasks, on the ImmediateBackend (in process)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction
from django.test import Client

from idempotency_django.django_tasks import KEY_ARGUMENT
from idempotency_django.models import IdempotencyEntry
from idempotency_django.outbox import OutboxError, enqueue, relay
from idempotency_django.outbox.backends import DJANGO_TASKS, is_django_task
from idempotency_django.outbox.delivery import dispatch
from idempotency_django.outbox.models import OutboxMessage
from tests import dj_tasks
from tests.helpers import new_key, post
from tests.testapp.models import Charge

pytestmark = pytest.mark.django_db(transaction=True)


def charges(reference: str) -> int:
    return Charge.objects.filter(reference=reference).count()


def test_a_committed_enqueue_runs_the_task_once_carrying_the_rows_key() -> None:
    with transaction.atomic():
        key = enqueue(dj_tasks.immediate_by_result_id, "t1", key="outbox-t1")
        assert charges("t1") == 0  # not before the commit
    assert charges("t1") == 1
    row = OutboxMessage.objects.get()
    assert row.sent_at is not None
    assert row.task == "tests.dj_tasks.immediate_by_result_id"
    assert row.options == {
        DJANGO_TASKS: {"backend": "default", "queue_name": "default", "priority": 0}
    }
    assert KEY_ARGUMENT not in row.kwargs
    assert IdempotencyEntry.objects.get().key.endswith(f"\x1f{key}")


def test_a_row_published_again_runs_once() -> None:
    # A relay that crashed after the publish and before marking the row sent publishes
    # it again: a new result id each time, the same carried key.
    with transaction.atomic():
        enqueue(dj_tasks.immediate_by_result_id, "t2", key="outbox-t2")
    row = OutboxMessage.objects.get()
    dispatch(row)
    dispatch(row)
    assert charges("t2") == 1
    assert relay(ignore_schedule=True) == {"sent": 0, "failed": 0}


def test_a_rolled_back_enqueue_never_runs() -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        enqueue(dj_tasks.immediate_by_result_id, "t3", key="outbox-t3")
        raise RuntimeError("the business write failed")
    assert relay(ignore_schedule=True) == {"sent": 0, "failed": 0}
    assert charges("t3") == 0
    assert not OutboxMessage.objects.exists()


def test_a_failed_first_publish_is_delivered_later_once(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = dj_tasks.immediate_by_result_id.get_backend()

    def down(*args: Any, **kwargs: Any) -> None:
        raise ConnectionRefusedError("tasks backend down")

    with monkeypatch.context() as patched:
        patched.setattr(type(backend), "enqueue", down)
        with transaction.atomic():
            enqueue(dj_tasks.immediate_by_result_id, "t4", key="outbox-t4")
        assert relay(ignore_schedule=True) == {"sent": 0, "failed": 1}
    row = OutboxMessage.objects.get()
    assert row.sent_at is None
    assert row.failures == 2
    assert charges("t4") == 0
    assert relay(ignore_schedule=True) == {"sent": 1, "failed": 0}
    assert relay(ignore_schedule=True) == {"sent": 0, "failed": 0}
    assert charges("t4") == 1


def test_options_choose_the_queue_and_priority_and_unknown_ones_are_refused() -> None:
    with transaction.atomic():
        enqueue(
            dj_tasks.immediate_by_key, "t5", key="k5", options={"priority": 5, "queue_name": "q"}
        )
        with pytest.raises(OutboxError, match="countdown"):
            enqueue(dj_tasks.immediate_by_key, "t5", key="k6", options={"countdown": 3})
    row = OutboxMessage.objects.get()
    assert row.options[DJANGO_TASKS]["priority"] == 5
    assert row.options[DJANGO_TASKS]["queue_name"] == "q"


def test_a_task_without_idempotent_task_is_refused() -> None:
    with transaction.atomic(), pytest.raises(OutboxError, match="@idempotent_task"):
        enqueue(dj_tasks.plain, "t6", key="k")
    assert is_django_task(dj_tasks.plain)
    assert not is_django_task("tests.receipt")


@pytest.mark.urls("tests.testapp.django_tasks_views")
def test_a_protected_view_enqueues_once_and_a_retry_replays(client: Client) -> None:
    key = new_key()
    body = {"reference": "v1", "task": "immediate_by_result_id"}
    first = post(client, "/tasks/orders/", key, body)
    again = post(client, "/tasks/orders/", key, body)
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json()
    assert charges("order-v1") == charges("receipt-v1") == 1
    assert OutboxMessage.objects.get().key == first.json()["receipt_key"]


@pytest.mark.urls("tests.testapp.django_tasks_views")
def test_a_rolled_back_view_enqueues_nothing(client: Client) -> None:
    body = {"reference": "v2", "task": "immediate_by_result_id", "fail": True}
    assert post(client, "/tasks/orders/", new_key(), body).status_code == 503
    assert relay(ignore_schedule=True) == {"sent": 0, "failed": 0}
    assert charges("order-v2") == charges("receipt-v2") == 0
    assert not OutboxMessage.objects.exists()
