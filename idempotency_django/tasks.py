"""Celery tasks (this module, and only it, imports Celery): schedule them with beat."""

from __future__ import annotations

from idempotency_django._adapters.extras import raise_missing_extra

try:
    from celery import shared_task
except ModuleNotFoundError as error:  # pragma: no cover  (tested in a subprocess)
    raise_missing_extra(error, __name__, "celery")

from idempotency_django import purge
from idempotency_django.databases import chosen_or_every


@shared_task
def purge_idempotency(
    batch_size: int = purge.DEFAULT_BATCH_SIZE, database: str | None = None, dry_run: bool = False
) -> dict[str, int]:
    """``manage.py purge_idempotency`` as a task; returns ``{"expired": n, "abandoned": n}``,
    summed over ``database`` or, by default, every alias holding entries."""
    totals = {"expired": 0, "abandoned": 0}
    for alias in chosen_or_every(database):
        counts = purge.purge(using=alias, batch_size=batch_size, dry_run=dry_run).as_dict()
        totals = {name: totals[name] + counts[name] for name in totals}
    return totals


__all__ = ["purge_idempotency"]
