"""Consumers, every way a message can fail: the Celery preset's rows, on a real worker.

tests/test_consumer_contract.py runs the table over RabbitMQ, NATS JetStream and Redis
Streams; Celery's consumer is a worker whose pool child runs the task, so a kill takes
the child (the worker requeues the message: ``reject_on_worker_lost``), two consumers
are two workers on one queue, and the dead-letter path is ``Reject(requeue=False)``
(the queue's dead-letter exchange where it has one) with the dead letter an operator
sees in ``ConsumerFailure`` (the admin). The task, ``tests.consume_event``
(tests/celery_tasks.py), runs tests/consumer_harness.py's handler through
``consumers.celery.handle`` under ``CONSUMER_POLICY``, whose ``max_attempts`` (5) is
past Celery's own default ``max_retries`` (3): the policy alone bounds the tries.
"""

from __future__ import annotations

import functools
import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.contrib import admin
from django.test import Client
from django.urls import path, reverse

from idempotency_django.consumers.models import ConsumerFailure
from idempotency_django.models import IdempotencyEntry
from tests import celery_harness
from tests.broker_proxy import CuttableProxy
from tests.celery_tasks import CONSUMER_POLICY
from tests.consumer_harness import UNSTORABLE, count, steps, via_port
from tests.testapp.models import Charge

pytestmark = [
    pytest.mark.requires_postgres,
    pytest.mark.system,
    pytest.mark.django_db(transaction=True),
]
urlpatterns = [path("admin/", admin.site.urls)]
MAX_ATTEMPTS = CONSUMER_POLICY.max_attempts


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[celery_harness.Worker]:
    with celery_harness.start_worker(tmp_path, "redis", concurrency=1) as running:
        yield running


def publish(worker: celery_harness.Worker, *events: dict[str, Any]) -> list[str]:
    """Each event as one task message, in order; their task ids."""
    ids = [f"task-{uuid.uuid4().hex[:12]}" for _ in events]
    for task_id, event in zip(ids, events, strict=True):
        worker.app.send_task("tests.consume_event", args=[event], task_id=task_id)
    return ids


def stepped(worker: celery_harness.Worker, step: str, event: str, times: int = 1) -> bool:
    return steps(worker.traces, step, event) == times


def wait_for_step(worker: celery_harness.Worker, step: str, event: str, times: int = 1) -> None:
    worker.wait_for(functools.partial(stepped, worker, step, event, times), f"{step} {event!r}")


@pytest.mark.urls(__name__)
def test_a_raising_handler_runs_max_attempts_times_then_is_a_dead_letter_in_the_admin(
    worker: celery_harness.Worker, admin_client: Client
) -> None:
    """More tries than Celery's default max_retries: the policy bounds them, not Celery."""
    publish(worker, {"id": "p1", "amount": "poison"}, {"id": "e2", "amount": 5})
    wait_for_step(worker, "dead_letter", "p1")
    wait_for_step(worker, "ack", "e2")
    assert steps(worker.traces, "ran", "p1") == MAX_ATTEMPTS
    assert steps(worker.traces, "retry", "p1") == MAX_ATTEMPTS - 1
    dead = ConsumerFailure.objects.get(key__endswith="\x1fp1")
    assert (dead.failures, dead.dead_at is not None) == (MAX_ATTEMPTS, True)
    assert not IdempotencyEntry.objects.filter(key__endswith="\x1fp1").exists()
    changelist = reverse("admin:idempotency_consumers_consumerfailure_changelist")
    assert "p1" in admin_client.get(changelist, {"state": "dead"}).content.decode()
    publish(worker, {"id": "p1", "amount": 7})  # the producer's fixed event, the same id
    wait_for_step(worker, "ack", "p1")
    assert Charge.objects.filter(reference="p1").count() == 1
    assert Charge.objects.filter(reference="e2").count() == 1


def test_the_handlers_own_statement_timeout_and_deadlock_are_failures_then_dead_letters(
    worker: celery_harness.Worker,
) -> None:
    """PostgreSQL's own errors in the handler: counted, never "the store is away"."""
    publish(
        worker,
        {"id": "t1", "amount": "timeout"},
        {"id": "d1", "amount": "deadlock"},
        {"id": "e2", "amount": 5},
    )
    for event in ("t1", "d1"):
        wait_for_step(worker, "dead_letter", event)
    wait_for_step(worker, "ack", "e2")
    assert steps(worker.traces, "ran", "t1") == steps(worker.traces, "ran", "d1") == MAX_ATTEMPTS
    assert ConsumerFailure.objects.filter(dead_at=None).count() == 0
    assert ConsumerFailure.objects.count() == 2
    assert Charge.objects.filter(reference="e2").count() == 1


def test_a_worker_child_killed_inside_the_handler_is_redelivered_and_commits_once(
    worker: celery_harness.Worker,
) -> None:
    """SIGKILL with the handler's row written, uncommitted: the redelivery runs again."""
    publish(worker, {"id": "b1", "amount": 1, "hold": "until_killed"})
    pid_file = worker.traces / "pid-b1"
    worker.wait_for(pid_file.exists, "the first run to write its row")
    pid = int(pid_file.read_text())
    assert pid in worker.children()
    (worker.traces / "killed-b1").touch()
    os.kill(pid, signal.SIGKILL)
    wait_for_step(worker, "ack", "b1")
    assert steps(worker.traces, "delivered", "b1") == steps(worker.traces, "ran", "b1") == 2
    assert steps(worker.traces, "committed", "b1") == 1
    assert Charge.objects.filter(reference="b1").count() == 1
    assert not ConsumerFailure.objects.exists()  # a run that finished forgets the lost one


def test_a_worker_child_killed_after_the_commit_is_replayed_with_one_effect(
    worker: celery_harness.Worker,
) -> None:
    """SIGKILL after the commit, before the ack: the redelivery replays, never runs."""
    (worker.traces / "hold-e1").touch()
    publish(worker, {"id": "e1", "amount": 10})
    wait_for_step(worker, "committed", "e1")
    [child] = worker.children()
    os.kill(child, signal.SIGKILL)
    (worker.traces / "hold-e1").unlink()
    wait_for_step(worker, "ack", "e1")
    assert steps(worker.traces, "delivered", "e1") == 2
    assert steps(worker.traces, "ran", "e1") == 1
    assert Charge.objects.filter(reference="e1").count() == 1
    assert not ConsumerFailure.objects.exists()


def test_a_poison_that_kills_its_worker_child_is_a_dead_letter_after_max_attempts_runs(
    worker: celery_harness.Worker,
) -> None:
    """Each run SIGKILLs the pool child; the worker requeues it: counted before it runs,
    it is dead-lettered unrun at the delivery after the last; the event behind it handled."""
    publish(worker, {"id": "k1", "amount": "kill"}, {"id": "e3", "amount": 3})
    wait_for_step(worker, "dead_letter", "k1")
    wait_for_step(worker, "ack", "e3")
    assert steps(worker.traces, "ran", "k1") == MAX_ATTEMPTS
    assert steps(worker.traces, "delivered", "k1") == MAX_ATTEMPTS + 1
    dead = ConsumerFailure.objects.get()
    assert (dead.failures, dead.dead_at is not None) == (MAX_ATTEMPTS, True)
    assert not IdempotencyEntry.objects.filter(key__endswith="\x1fk1").exists()
    assert Charge.objects.filter(reference="e3").count() == 1


def test_an_id_the_store_cannot_hold_is_a_dead_letter_and_the_task_behind_it_runs(
    worker: celery_harness.Worker,
) -> None:
    publish(
        worker, *({"id": event, "amount": 1} for event in UNSTORABLE), {"id": "e4", "amount": 4}
    )
    wait_for_step(worker, "ack", "e4")
    for event in UNSTORABLE:
        wait_for_step(worker, "dead_letter", event)
        assert steps(worker.traces, "ran", event) == 0
    assert worker.process.poll() is None
    assert Charge.objects.count() == 1


def test_two_workers_racing_one_event_run_it_once_and_ack_both_deliveries(
    worker: celery_harness.Worker, tmp_path: Path
) -> None:
    """One event sent twice (two task ids), two workers: the first run holds its claim
    until the other delivery has started; one run, one effect, two acks."""
    with celery_harness.start_worker(tmp_path, "redis", joining=worker):
        publish(worker, *[{"id": "r1", "amount": 1, "hold": "until_raced"}] * 2)
        wait_for_step(worker, "ack", "r1", times=2)
    assert steps(worker.traces, "ran", "r1") == steps(worker.traces, "committed", "r1") == 1
    assert count(worker.traces, "dead_letter") == 0
    assert Charge.objects.filter(reference="r1").count() == 1
    assert not ConsumerFailure.objects.exists()


def test_a_database_outage_retries_past_celerys_max_retries_and_each_event_runs_once_after(
    tmp_path: Path,
) -> None:
    """PostgreSQL cut away (a proxy) while events arrive: each is retried more often than
    Celery's default max_retries, never counted nor given up, then handled once."""
    database = celery_harness.database_url()
    proxy = CuttableProxy(int(urlsplit(database).port or 5432))
    before = [{"id": f"b{n}", "amount": n} for n in range(2)]
    during = [{"id": f"d{n}", "amount": n} for n in range(3)]
    try:
        with celery_harness.start_worker(
            tmp_path, "redis", database=via_port(database, proxy.port)
        ) as worker:
            publish(worker, *before)
            worker.wait_for(lambda: count(worker.traces, "ack") == 2, "the first acks")
            proxy.cut()
            publish(worker, *during)
            retries = len(during) * (MAX_ATTEMPTS + 1)
            worker.wait_for(lambda: count(worker.traces, "retry") >= retries, "the outage")
            proxy.restore()
            worker.wait_for(lambda: count(worker.traces, "ack") == 5, "every ack")
    finally:
        proxy.close()
    assert count(worker.traces, "dead_letter") == 0
    for event in before + during:
        assert Charge.objects.filter(reference=event["id"]).count() == 1, event
        assert steps(worker.traces, "committed", str(event["id"])) == 1, event
    assert not ConsumerFailure.objects.exists()
