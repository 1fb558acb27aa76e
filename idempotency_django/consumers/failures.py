"""The durable count of a message's handler failures (:class:`~.models.ConsumerFailure`)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from datetime import datetime, timedelta

from django.db import IntegrityError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import DateTimeField, ExpressionWrapper, F, QuerySet
from django.db.models.functions import Now

from idempotency_django.consumers.counting import GivenUpMeanwhile
from idempotency_django.consumers.models import ConsumerFailure


def seen_dead(using: str, tenant: str, key: str) -> datetime | None:
    """As a delivery arrives: when its message was last given up on, if it is a dead letter."""
    rows = ConsumerFailure.objects.using(using).filter(tenant=tenant, key=key)
    return rows.values_list("dead_at", flat=True).first()


def started(using: str, tenant: str, key: str, dead_before: datetime | None) -> int:
    """Count a run, by the delivery that holds the claim, before its handler starts, in a
    statement of its own (autocommit): a run that takes its process down (SIGKILL, the
    OOM killer, a segfault) is counted too.

    Returns the runs so far that neither finished nor were given up on, this one
    included. A fresh message costs one ``INSERT``; its row goes with its commit. A
    dead letter starts afresh if it was one when this delivery arrived (``dead_before``,
    :func:`seen_dead`: the message sent again); given up on since, it raises
    :class:`GivenUpMeanwhile`.
    """
    inside = connections[using].in_atomic_block  # a caller's transaction: a savepoint
    try:
        with transaction.atomic(using=using) if inside else nullcontext():
            ConsumerFailure.objects.using(using).create(tenant=tenant, key=key, failures=1)
        return 1
    except IntegrityError:  # run before: one more
        pass
    rows = ConsumerFailure.objects.using(using).filter(tenant=tenant, key=key)
    with transaction.atomic(using=using):
        if not (rows.filter(dead_at=None).update(failures=F("failures") + 1)) and not (
            _sent_again(rows, dead_before)
        ):
            _given_up(rows)
        runs = rows.values_list("failures", flat=True).first()
    return runs or 1


@contextmanager
def apart(using: str, wanted: bool = True) -> Iterator[None]:
    """The block's queries on ``using`` go to a connection of its own, in autocommit
    (``wanted``): a count that commits while the claim's transaction stays open on the
    first (the lock protocol). Kept per thread as Django keeps the first
    (``CONN_MAX_AGE``: by default closed after each use).
    """
    if not wanted:
        yield
        return
    mine: dict[str, BaseDatabaseWrapper] = _apart.__dict__.setdefault("connections", {})
    own = mine.get(using) or mine.setdefault(using, connections.create_connection(using))
    outer = connections[using]
    connections[using] = own
    try:
        yield
    finally:
        connections[using] = outer
        own.close_if_unusable_or_obsolete()


_apart = threading.local()


def uncount(using: str, tenant: str, key: str) -> None:
    """Take back :func:`started`'s count: the run never began (its claim taken over before
    its transaction held it) or the store went away (never a failure)."""
    rows = ConsumerFailure.objects.using(using).filter(tenant=tenant, key=key, dead_at=None)
    if not rows.filter(failures__gt=1).update(failures=F("failures") - 1):
        rows.delete()


def _sent_again(rows: QuerySet[ConsumerFailure], dead_before: datetime | None) -> int:
    """A dead letter this delivery saw as it arrived starts afresh; one given up on since
    (SQLite keeps the milliseconds of what it was sent: ``<=``) does not."""
    if dead_before is None:
        return 0
    return _restart_dead(rows.filter(dead_at__lte=dead_before), runs=1)


def _restart_dead(rows: QuerySet[ConsumerFailure], runs: int) -> int:
    """A dead letter's message sent again starts afresh (its row was the admin's view)."""
    now = ExpressionWrapper(Now(), output_field=DateTimeField())
    return rows.exclude(dead_at=None).update(
        failures=runs, dead_at=None, first_failed_at=now, last_error=""
    )


def gave_up(using: str, tenant: str, key: str, failures: int, error: BaseException) -> None:
    """Mark the count a dead letter: kept for the admin until the purge, not counted on."""
    now = ExpressionWrapper(Now(), output_field=DateTimeField())
    ConsumerFailure.objects.using(using).filter(tenant=tenant, key=key).update(
        dead_at=now, failures=failures, last_error=repr(error)[:2000]
    )


def count(
    using: str, tenant: str, key: str, error: BaseException, add: int = 1
) -> tuple[int, float]:
    """Add ``add`` failures (0: the run was counted when it started) and note ``error``;
    return the failures so far and the first one's age in seconds.

    Its own short transaction: the count survives the consumer (a SIGKILL, a
    redeploy), so a poison message is given up on. A run counted when it started
    whose message was given up on meanwhile (it lost its claim: the server ended its
    transaction, another delivery found it lost) raises :class:`GivenUpMeanwhile`.
    """
    rows = ConsumerFailure.objects.using(using).filter(tenant=tenant, key=key)
    noted = repr(error)[:2000]
    with transaction.atomic(using=using):
        if not add:
            _given_up(rows)
        _restart_dead(rows, runs=0)  # a task given up on before, run again
        if not rows.update(failures=F("failures") + add, last_error=noted):
            try:
                with transaction.atomic(using=using):
                    ConsumerFailure.objects.using(using).create(
                        tenant=tenant, key=key, failures=max(add, 1), last_error=noted
                    )
            except IntegrityError:  # another consumer counted its first failure meanwhile
                rows.update(failures=F("failures") + max(add, 1), last_error=noted)
        now = ExpressionWrapper(Now(), output_field=DateTimeField())
        failures, first, current = (
            rows.annotate(now=now).values_list("failures", "first_failed_at", "now").get()
        )
    age: timedelta = current - first
    return failures, max(0.0, age.total_seconds())


def _given_up(rows: QuerySet[ConsumerFailure]) -> None:
    dead = rows.exclude(dead_at=None).values_list("failures", flat=True).first()
    if dead is not None:
        raise GivenUpMeanwhile(dead)


def given_up_since(using: str, tenant: str, key: str, dead_before: datetime | None) -> int | None:
    """The failures of a dead letter made since a delivery arrived (``dead_before``), if any."""
    rows = ConsumerFailure.objects.using(using).filter(tenant=tenant, key=key)
    if dead_before is not None:
        rows = rows.filter(dead_at__gt=dead_before)
    return rows.exclude(dead_at=None).values_list("failures", flat=True).first()


def forget(using: str, tenant: str, key: str) -> None:
    """Drop the count: the message is done (in its transaction) or given up on."""
    ConsumerFailure.objects.using(using).filter(tenant=tenant, key=key).delete()


def purge_stale(using: str, batch_size: int) -> int:
    """Delete counts whose first failure is older than ``IDEMPOTENCY_TTL``, a batch at a time."""
    from idempotency_django._conf import conf

    cutoff = ExpressionWrapper(Now() - conf.TTL, output_field=DateTimeField())
    rows = ConsumerFailure.objects.using(using)
    stale = rows.filter(first_failed_at__lt=cutoff).values_list("pk", flat=True)
    deleted = 0
    while batch := list(stale[:batch_size]):
        deleted += rows.filter(pk__in=batch).delete()[0]
        if len(batch) < batch_size:
            break
    return deleted
