"""The Celery app of the worker test: ``celery -A tests.celery_app worker``.

Broker and results live on a Redis database of their own, and a queue of their
own, so other suites sharing the Redis server never see these messages. The
worker finds its Django settings and database through the environment
(``DJANGO_SETTINGS_MODULE``, ``DATABASE_URL``), set by the test that starts it.
"""

from __future__ import annotations

import os

from celery import Celery

BROKER_URL = os.environ.get("IDEMPOTENCY_TEST_CELERY_URL", "redis://127.0.0.1:6379/11")
# Its own queue per run (tox sets one per env): parallel runs share the broker.
QUEUE = os.environ.get("IDEMPOTENCY_TEST_CELERY_QUEUE", "idempotency-django-tests")

app = Celery(
    "idempotency_django_tests",
    broker=BROKER_URL,
    backend=BROKER_URL,
    include=["idempotency_django.tasks"],
)
app.conf.update(
    task_default_queue=QUEUE,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    result_expires=600,
)
