"""The relay as a Celery task (this module imports Celery): schedule it with beat."""

from __future__ import annotations

from celery import shared_task

from idempotency_django.databases import chosen_or_every
from idempotency_django.outbox import delivery
from idempotency_django.outbox.models import OutboxMessage


@shared_task
def relay_outbox(
    batch_size: int = delivery.DEFAULT_BATCH_SIZE, database: str | None = None
) -> dict[str, int]:
    """``manage.py relay_outbox`` as a task; returns ``{"sent": n, "failed": n}``,
    summed over ``database`` or, by default, every alias holding outbox rows."""
    totals = {"sent": 0, "failed": 0}
    for alias in chosen_or_every(database, OutboxMessage):
        counts = delivery.relay(using=alias, batch_size=batch_size)
        totals = {name: totals[name] + counts[name] for name in totals}
    return totals


__all__ = ["relay_outbox"]
