"""A transactional outbox: tasks recorded with the business rows, published after commit.

``enqueue()`` writes a row in the caller's transaction; after commit a fast path
publishes it at once, and the relay (``manage.py relay_outbox`` or the beat task
``idempotency_django.outbox.tasks.relay_outbox``) publishes whatever the fast
path missed. Every publish of a row uses its key as the Celery task id, so a
consumer decorated with ``idempotent_task`` runs it once. Importing this package
needs neither Celery nor the model; publishing needs Celery.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from idempotency_django.outbox.api import enqueue
from idempotency_django.outbox.errors import OutboxError

if TYPE_CHECKING:
    from idempotency_django.outbox.delivery import (
        OutboxStats,
        discard,
        purge_sent,
        relay,
        send_again,
        stats,
    )

__all__ = [
    "OutboxError",
    "OutboxStats",
    "discard",
    "enqueue",
    "purge_sent",
    "relay",
    "send_again",
    "stats",
]
_DELIVERY = frozenset({"OutboxStats", "discard", "purge_sent", "relay", "send_again", "stats"})


def __getattr__(name: str) -> Any:
    # The delivery module imports the model: only once the app registry is ready.
    if name in _DELIVERY:
        return getattr(import_module("idempotency_django.outbox.delivery"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
