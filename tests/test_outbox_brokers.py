"""The outbox's publish against real brokers (RabbitMQ, Redis): a publish the broker never kept
leaves its row pending, and a broker outage costs the fast path little."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery
from kombu import Connection

from idempotency_django.outbox import broker as outbox_broker
from idempotency_django.outbox import delivery
from idempotency_django.outbox.models import OutboxMessage
from tests import celery_harness
from tests.broker_proxy import AMQP_PUBLISH, REDIS_PUBLISH, SwallowingProxy

pytestmark = [pytest.mark.system, pytest.mark.django_db(transaction=True)]
PORTS = {"rabbitmq": 5672, "redis": 6379}
MARKERS = {"rabbitmq": AMQP_PUBLISH, "redis": REDIS_PUBLISH}


def _url(kind: str, port: int) -> str:
    real = celery_harness.broker_url(kind)  # skips (fails under CI) if the broker is down
    host = f"127.0.0.1:{PORTS[kind]}"
    return real.replace(host, f"127.0.0.1:{port}")


def _app(url: str, queue: str) -> Celery:
    app = Celery("idempotency_django_review_broker", broker=url, set_as_current=False)
    app.conf.task_default_queue = queue
    return app


def _queued(url: str, queue: str) -> int:
    with Connection(url) as connection:
        channel: Any = connection.channel()  # the transport's own channel class
        if url.startswith("redis"):
            return int(channel.client.llen(queue))
        return int(channel.queue_declare(queue, passive=True).message_count)


def _drop_queue(url: str, queue: str) -> None:
    with Connection(url) as connection:
        channel: Any = connection.channel()
        if url.startswith("redis"):
            channel.client.delete(queue)
        else:
            channel.queue_delete(queue)


@pytest.fixture(params=["rabbitmq", "redis"])
def broker(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    kind = str(request.param)
    url, queue = _url(kind, PORTS[kind]), f"h-review-{uuid.uuid4().hex[:8]}"
    yield url, queue
    _drop_queue(url, queue)


def _row(key: str) -> OutboxMessage:
    return OutboxMessage.objects.create(key=key, task="tests.receipt", args=["item2"])


def test_a_publish_the_broker_never_kept_leaves_the_row_pending(
    broker: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """0.2.0 (py-amqp, no confirms): the row was marked sent and 0 messages were queued."""
    url, queue = broker
    kind = "redis" if url.startswith("redis") else "rabbitmq"
    monkeypatch.setattr(delivery, "RELAY_TIMEOUT", 1.0)
    proxy = SwallowingProxy(PORTS[kind], MARKERS[kind])
    try:
        proxied = _app(_url(kind, proxy.port), queue)
        proxied.set_current()
        _app(url, queue).connection_for_write().ensure_connection()
        if kind == "rabbitmq":  # the queue exists (declared unswallowed), empty
            with Connection(url) as connection:
                channel: Any = connection.channel()
                channel.queue_declare(queue, durable=True, auto_delete=False)
        row = _row(str(uuid.uuid4()))
        proxy.armed.set()
        started = time.monotonic()
        assert delivery.relay(ignore_schedule=True) == {"sent": 0, "failed": 1}
        assert time.monotonic() - started < 5  # bounded by the publish timeout
        assert proxy.swallowed >= 1
        row.refresh_from_db()
        assert row.sent_at is None
        assert _queued(url, queue) == 0
    finally:
        proxy.close()
    _app(url, queue).set_current()  # the broker is reachable again: the relay delivers
    assert delivery.relay(ignore_schedule=True) == {"sent": 1, "failed": 0}
    assert _queued(url, queue) == 1


@pytest.mark.parametrize("outage", ["refused", "silent"])
def test_a_broker_outage_costs_the_fast_path_at_most_100_ms(
    broker: tuple[str, str], outage: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """0.2.0: ~6 s per request (kombu's and redis-py's own retries), retry=False or not.

    "refused": nothing listens; "silent": a broker that accepts the connection and
    never answers (a proxy swallowing every byte).
    """
    from django.db import transaction

    from idempotency_django.outbox import enqueue

    url, queue = broker
    kind = "redis" if url.startswith("redis") else "rabbitmq"
    proxy = SwallowingProxy(PORTS[kind], b"")
    proxy.armed.set()
    port = 1 if outage == "refused" else proxy.port
    _app(_url(kind, port), queue).set_current()
    delivery._paused_until[0] = 0.0
    tries: list[str] = []
    real_send = outbox_broker.send

    def counted(app: Celery, row: OutboxMessage, timeout: float) -> None:
        tries.append(row.key)
        real_send(app, row, timeout)

    monkeypatch.setattr(outbox_broker, "send", counted)
    costs, baseline = [], []
    try:
        for _ in range(5):
            with transaction.atomic():
                enqueue("tests.receipt", "outage", key=f"outage-{uuid.uuid4()}")
                started = time.perf_counter()
            costs.append(time.perf_counter() - started)  # the commit and its on_commit
        for _ in range(5):  # the same commit without a publish: what the outage adds is the rest
            with transaction.atomic():
                OutboxMessage.objects.create(key=f"baseline-{uuid.uuid4()}", task="t")
                started = time.perf_counter()
            baseline.append(time.perf_counter() - started)
    finally:
        proxy.close()
        delivery._paused_until[0] = 0.0
    base = sorted(baseline)[2]
    print(
        f"\nMEASURED fast path, broker {outage} [{kind}]: commit alone {base * 1000:.1f} ms; "
        + ", ".join(f"{c * 1000:.1f}" for c in costs)
        + " ms"
    )
    assert max(costs) < 1.0  # ~0.1 s at most, measured; generous for a loaded machine
    assert len(tries) == 1  # paused after the first failure: the relay takes the others
    assert OutboxMessage.objects.filter(sent_at__isnull=True, task="tests.receipt").count() == 5
