"""Celery: a task that consumes a message with :func:`.consume`.

::

    from idempotency_django.consumers import celery as preset

    @app.task(bind=True, acks_late=True)
    def on_order(self, event):
        return preset.handle(self, event["id"], lambda: charge(event))

``"ack"`` returns the (stored) result; ``"retry"`` sends the task again after
the verdict's delay (``self.retry``, not bounded by ``max_retries``: the give-up
policy bounds it); ``"dead_letter"`` raises ``Reject(requeue=False)``: not
requeued, routed to the queue's dead-letter exchange where the broker has one
(RabbitMQ). For a task whose whole body is the work, ``idempotent_task`` with
``max_attempts=`` does the same (:doc:`tasks`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, Final

from idempotency_django.consumers.core import consume
from idempotency_django.consumers.policy import ACK, RETRY

#: ``retry(max_retries=None)`` means the task's own ``max_retries`` (3 by default) to
#: Celery, which then raises the error past it: the message failed, acked, never a dead
#: letter (and a store outage lost). No bound of Celery's: the give-up policy is the bound.
_UNBOUNDED: Final = sys.maxsize


def handle(task: Any, message_id: str, handler: Callable[[], Any], **options: Any) -> Any:
    """Run ``handler()`` once per message id inside the bound ``task``; settle the delivery."""
    from celery.exceptions import Reject

    verdict = consume(message_id, handler, **options)
    if verdict.action == ACK:
        return verdict.result
    if verdict.action == RETRY:
        raise task.retry(countdown=verdict.delay, exc=verdict.error, max_retries=_UNBOUNDED)
    raise Reject(repr(verdict.error), requeue=False)


__all__ = ["handle"]
