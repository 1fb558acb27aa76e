"""The outbox with a real worker: crash after commit, broker down, two relays, rollback.

The consumer is ``tests.receipt`` (an ``idempotent_task``): each published row
carries its key as the task id, so however often it is delivered, one receipt
row commits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from idempotency_django.outbox import delivery
from idempotency_django.outbox.models import OutboxMessage
from tests import celery_app, celery_harness
from tests.conftest import close_connections_after
from tests.helpers import charges, new_key, post

pytestmark = [
    pytest.mark.requires_server,
    pytest.mark.system,
    pytest.mark.django_db(transaction=True),
]
ROOT = Path(__file__).resolve().parent.parent
CLOSED_PORT_BROKER = "redis://127.0.0.1:1/0"


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[celery_harness.Worker]:
    with celery_harness.start_worker(tmp_path, "redis", concurrency=2) as running:
        running.app.set_current()
        yield running


@pytest.fixture
def outbox_urls(settings: Any) -> None:
    settings.ROOT_URLCONF = "tests.testapp.outbox_views"


def receipts(reference: str) -> int:
    return charges(f"receipt:{reference}")


def report(
    test: str, worker: celery_harness.Worker, keys: list[str], references: list[str]
) -> None:
    seen = sum(worker.deliveries(key) for key in keys)
    done = sum(receipts(reference) for reference in references)
    print(f"\nCOUNTS outbox {test}: deliveries seen={seen} executions committed={done}")


CRASH = """
import os, signal, django
django.setup()
from django.db import transaction
from idempotency_django.outbox import enqueue
from tests.testapp.models import Charge
with transaction.atomic():
    Charge.objects.create(reference={reference!r}, amount=1)
    # Registered first, so it runs first: the process dies after the commit,
    # before the outbox's own on_commit publishes.
    transaction.on_commit(lambda: os.kill(os.getpid(), signal.SIGKILL))
    enqueue("tests.receipt", {reference!r}, key={key!r})
"""


@pytest.mark.parametrize("broker", ["redis", "rabbitmq"])
def test_killed_between_commit_and_publish_the_relay_delivers_once(
    tmp_path: Path, broker: str
) -> None:
    reference, key = f"crash-{uuid.uuid4().hex[:8]}", str(uuid.uuid4())
    with celery_harness.start_worker(tmp_path, broker, concurrency=1) as worker:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "DATABASE_URL": celery_harness.database_url(),
            "IDEMPOTENCY_TEST_CELERY_URL": CLOSED_PORT_BROKER,  # it must not get that far
        }
        code = CRASH.format(reference=reference, key=key)
        died = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=False)
        assert died.returncode == -9
        row = OutboxMessage.objects.get(key=key)
        assert (row.sent_at, row.attempts) == (None, 0)
        assert charges(reference) == 1  # the business row committed
        worker.app.set_current()
        assert delivery.relay(ignore_schedule=True) == {"sent": 1, "failed": 0}
        worker.wait_for(lambda: worker.finished(key) >= 1, "the receipt")
        assert delivery.relay(ignore_schedule=True) == {"sent": 0, "failed": 0}
        report(f"crash after commit [{broker}]", worker, [key], [reference])
        assert worker.deliveries(key) == 1
        assert receipts(reference) == 1


def test_a_broker_down_during_the_view_still_answers_and_delivers_later(
    worker: celery_harness.Worker, outbox_urls: None, client: Client
) -> None:
    reference, key = f"down-{uuid.uuid4().hex[:8]}", new_key()
    celery_app.make_app(CLOSED_PORT_BROKER, celery_app.BACKEND_URL).set_current()
    response = post(client, "/outbox/charges/", key, {"reference": reference})
    assert response.status_code == 201
    receipt_key = json.loads(response.content)["receipt_key"]
    row = OutboxMessage.objects.get(key=receipt_key)
    assert (row.sent_at, row.failures) == (None, 1)
    assert delivery.stats().failing == 1
    worker.app.set_current()  # the broker is back
    assert delivery.relay(ignore_schedule=True) == {"sent": 1, "failed": 0}
    worker.wait_for(lambda: worker.finished(receipt_key) >= 1, "the receipt")
    replay = post(client, "/outbox/charges/", key, {"reference": reference})
    assert replay["Idempotent-Replayed"] == "true"
    report("broker down", worker, [receipt_key], [reference])
    assert worker.deliveries(receipt_key) == 1
    assert receipts(reference) == 1
    assert charges(reference) == 1
    assert delivery.stats().pending == 0


def test_two_relays_at_once_publish_each_row_once(worker: celery_harness.Worker) -> None:
    references = [f"pair-{uuid.uuid4().hex[:8]}" for _ in range(40)]
    due = timezone.now() - timedelta(seconds=1)
    rows = [
        OutboxMessage.objects.create(
            key=str(uuid.uuid4()), task="tests.receipt", args=[ref], next_attempt_at=due
        )
        for ref in references
    ]
    published: Counter[str] = Counter()
    lock = threading.Lock()
    # Each relay's first publish waits for the other's: both hold a locked batch at
    # once, which only SKIP LOCKED allows (FOR UPDATE alone would block the second).
    both_in = threading.Barrier(2, timeout=30)
    first_of: set[int] = set()

    def publisher(row: OutboxMessage) -> None:
        me = threading.get_ident()
        if me not in first_of:
            first_of.add(me)
            both_in.wait()
        delivery.publish(row)
        with lock:
            published[row.key] += 1

    results: list[dict[str, int]] = []

    def run_relay() -> None:
        worker.app.set_current()  # Celery's current app is per thread
        results.append(delivery.relay(batch_size=5, publisher=publisher))

    threads = [threading.Thread(target=close_connections_after(run_relay)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    keys = [row.key for row in rows]
    assert sorted(r["failed"] for r in results) == [0, 0]
    assert all(r["sent"] > 0 for r in results), results
    assert sum(r["sent"] for r in results) == 40
    assert set(published.values()) == {1}
    assert len(published) == 40
    worker.wait_for(lambda: all(worker.finished(k) >= 1 for k in keys), "40 receipts")
    report("two relays", worker, keys, references)
    assert all(receipts(ref) == 1 for ref in references)
    assert sum(worker.deliveries(k) for k in keys) == 40


def test_a_rolled_back_view_publishes_nothing(
    worker: celery_harness.Worker, outbox_urls: None, client: Client
) -> None:
    reference = f"rollback-{uuid.uuid4().hex[:8]}"
    response = post(client, "/outbox/charges/", new_key(), {"reference": reference, "fail": True})
    assert response.status_code == 503
    assert not OutboxMessage.objects.exists()
    assert delivery.relay(ignore_schedule=True) == {"sent": 0, "failed": 0}
    # A sentinel through the same queue: whatever was published before it has been seen.
    sentinel = str(uuid.uuid4())
    worker.app.send_task("tests.receipt", args=["sentinel"], task_id=sentinel).get(
        timeout=celery_harness.PATIENCE
    )
    assert [line.split()[0] for line in worker.lines("deliveries")] == [sentinel]
    assert charges(reference) == 0


def test_item1_a_key_run_again_after_its_entry_expired_gets_its_receipt(
    worker: celery_harness.Worker, outbox_urls: None, client: Client
) -> None:
    """0.2.0: the second execution's receipt went out under the first's task id, and the
    consumer (24 h TTL) answered it with the first receipt: 2 charges, 1 receipt."""
    from idempotency_django.models import IdempotencyEntry

    reference, key = f"again-{uuid.uuid4().hex[:8]}", new_key()
    first = json.loads(post(client, "/outbox/charges/", key, {"reference": reference}).content)
    worker.wait_for(lambda: worker.finished(first["receipt_key"]) >= 1, "the first receipt")
    # The view's entry expires (a short ttl=); the consumer still holds its own entry.
    IdempotencyEntry.objects.filter(key=key).update(expires_at=timezone.now() - timedelta(1))
    answer = post(client, "/outbox/charges/", key, {"reference": reference})
    assert answer.status_code == 201  # run again, correctly
    second = json.loads(answer.content)["receipt_key"]
    expected = 2 if second == first["receipt_key"] else 1
    worker.wait_for(lambda: worker.finished(second) >= expected, "the second delivery")
    report("key run again", worker, [first["receipt_key"], second], [reference])
    assert charges(reference) == 2
    assert receipts(reference) == 2
    # Each execution's redeliveries stay equal: the relay republishes under the row's key.
    assert set(OutboxMessage.objects.values_list("key", flat=True)) == {
        first["receipt_key"],
        second,
    }
