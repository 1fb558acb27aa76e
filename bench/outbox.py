"""A Celery app for the outbox's fast path while the benchmark runs: Redis, a private queue.

``enqueue()`` publishes after the commit, inside the request, through Celery's
current app: the measured cost includes that publish. The broker is Redis
(``BENCH_CELERY_URL``, default ``BENCH_REDIS_URL``'s db 12), never the shared
RabbitMQ, and the queue is the run's own, deleted afterwards: no worker ever
sees these messages.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import redis

from bench.measure import Sample

BROKER = os.environ.get(
    "BENCH_CELERY_URL", os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/12")
)


@contextmanager
def broker() -> Iterator[None]:
    """Celery's current app publishing to a private queue on Redis for the duration."""
    from celery import Celery

    queue = f"idem_bench_outbox_{uuid.uuid4().hex[:8]}"
    app = Celery("idem_bench", broker=BROKER, set_as_current=False)
    app.conf.update(
        task_default_queue=queue, broker_connection_timeout=2, broker_connection_retry=False
    )
    app.set_current()
    try:
        yield
    finally:
        # Straight to Redis: kombu's queue_delete() forgets queues this
        # connection didn't declare itself.
        client = redis.Redis.from_url(BROKER)
        client.delete(queue, *(f"_kombu.{kind}.{queue}" for kind in _BINDINGS))
        client.close()


_BINDINGS = ("binding", "binding_permanent")


def without_fast_path(sample: Sample) -> Sample:
    """``sample`` with the on_commit publish left out: the row waits for the relay.

    Splits enqueue()'s cost into its part in the view's transaction and the fast
    path's (its own transaction and the publish, after the commit).
    """
    from idempotency_django.outbox import delivery

    def skipped(pk: int, using: str) -> None:
        return None

    def run() -> float:
        fast_path = delivery.publish_after_commit
        delivery.publish_after_commit = skipped
        try:
            return sample()
        finally:
            delivery.publish_after_commit = fast_path

    return run
