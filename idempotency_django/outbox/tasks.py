"""The relay as a Celery task (this module imports Celery): schedule it with beat."""

from __future__ import annotations

from celery import shared_task

from idempotency_django.outbox import delivery


@shared_task
def relay_outbox(
    batch_size: int = delivery.DEFAULT_BATCH_SIZE, database: str | None = None
) -> dict[str, int]:
    """``manage.py relay_outbox`` as a task; returns ``{"sent": n, "failed": n}``."""
    return delivery.relay(using=database, batch_size=batch_size)
