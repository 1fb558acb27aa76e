"""The Celery app of the worker tests: ``celery -A tests.celery_app worker``.

Broker and results live on a Redis database of their own (or RabbitMQ), and a
queue of their own, so other suites sharing the servers never see these
messages. The worker finds everything through the environment, set by the
harness that starts it (:mod:`tests.celery_harness`): ``DJANGO_SETTINGS_MODULE``,
``DATABASE_URL``, ``IDEMPOTENCY_TEST_CELERY_URL`` (broker),
``IDEMPOTENCY_TEST_CELERY_BACKEND``, ``IDEMPOTENCY_TEST_CELERY_QUEUE`` and
``IDEMPOTENCY_TEST_VISIBILITY_TIMEOUT``.
"""

from __future__ import annotations

import os

from celery import Celery

BROKER_URL = os.environ.get("IDEMPOTENCY_TEST_CELERY_URL", "redis://127.0.0.1:6379/11")
BACKEND_URL = os.environ.get("IDEMPOTENCY_TEST_CELERY_BACKEND", BROKER_URL)
QUEUE = os.environ.get("IDEMPOTENCY_TEST_CELERY_QUEUE", "idempotency-django-tests")
INCLUDE = ["idempotency_django.tasks", "tests.celery_tasks"]


def make_app(
    broker: str = BROKER_URL,
    backend: str = BACKEND_URL,
    queue: str = QUEUE,
    visibility_timeout: float | None = None,
) -> Celery:
    """A Celery app on ``broker``; the worker's and the publishing test's are built alike."""
    celery = Celery("idempotency_django_tests", broker=broker, backend=backend, include=INCLUDE)
    celery.conf.update(
        task_default_queue=queue,
        broker_connection_retry_on_startup=True,
        broker_connection_timeout=2,
        worker_hijack_root_logger=False,
        worker_prefetch_multiplier=1,
        result_expires=600,
    )
    if visibility_timeout is not None:
        # Restore unacknowledged messages on every sweep, not every tenth one.
        celery.conf.broker_transport_options = {
            "visibility_timeout": visibility_timeout,
            "unacked_restore_interval": 1,
            "unacked_restore_throttle": 1,
        }
    return celery


def _visibility_timeout() -> float | None:
    value = os.environ.get("IDEMPOTENCY_TEST_VISIBILITY_TIMEOUT")
    return float(value) if value else None


app = make_app(visibility_timeout=_visibility_timeout())
