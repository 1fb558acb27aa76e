"""The durable count of a message's handler failures (:class:`~.models.ConsumerFailure`)."""

from __future__ import annotations

from datetime import timedelta

from django.db import IntegrityError, transaction
from django.db.models import DateTimeField, ExpressionWrapper, F
from django.db.models.functions import Now

from idempotency_django.consumers.models import ConsumerFailure


def count(using: str, tenant: str, key: str, error: BaseException) -> tuple[int, float]:
    """Add one failure; return the failures so far and the first one's age in seconds.

    Its own short transaction, after the handler's rolled back: the count survives
    the consumer (a SIGKILL, a redeploy), so a poison message is given up on.
    """
    rows = ConsumerFailure.objects.using(using).filter(tenant=tenant, key=key)
    with transaction.atomic(using=using):
        if not rows.update(failures=F("failures") + 1, last_error=repr(error)[:2000]):
            try:
                with transaction.atomic(using=using):
                    ConsumerFailure.objects.using(using).create(
                        tenant=tenant, key=key, failures=1, last_error=repr(error)[:2000]
                    )
            except IntegrityError:  # another consumer counted its first failure meanwhile
                rows.update(failures=F("failures") + 1, last_error=repr(error)[:2000])
        now = ExpressionWrapper(Now(), output_field=DateTimeField())
        failures, first, current = (
            rows.annotate(now=now).values_list("failures", "first_failed_at", "now").get()
        )
    age: timedelta = current - first
    return failures, max(0.0, age.total_seconds())


def forget(using: str, tenant: str, key: str) -> None:
    """Drop the count: the message is done (in its transaction) or given up on."""
    ConsumerFailure.objects.using(using).filter(tenant=tenant, key=key).delete()


def purge_stale(using: str, batch_size: int) -> int:
    """Delete counts whose first failure is older than ``IDEMPOTENCY_TTL``, a batch at a time."""
    from idempotency_django.conf import conf

    cutoff = ExpressionWrapper(Now() - conf.TTL, output_field=DateTimeField())
    rows = ConsumerFailure.objects.using(using)
    stale = rows.filter(first_failed_at__lt=cutoff).values_list("pk", flat=True)
    deleted = 0
    while batch := list(stale[:batch_size]):
        deleted += rows.filter(pk__in=batch).delete()[0]
        if len(batch) < batch_size:
            break
    return deleted
