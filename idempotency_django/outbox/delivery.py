"""Publishing outbox rows: the on_commit fast path, the relay, stats and purge.

Both paths take the row with ``SELECT ... FOR UPDATE SKIP LOCKED`` and publish
while holding it, then mark it sent in the same short transaction: two relays
(or a relay and the fast path) never publish one row at the same time. A crash
after the publish and before that commit publishes the row again later, under
the same task id: delivery is at least once, execution once by the consumer.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import Count, DateTimeField, ExpressionWrapper, F, Q, Sum
from django.db.models.functions import Now

from idempotency_django import signals
from idempotency_django._conf import as_timedelta, conf
from idempotency_django.databases import default_alias
from idempotency_django.outbox import backends
from idempotency_django.outbox.models import OutboxMessage
from idempotency_django.purge import DEFAULT_BATCH_SIZE as DEFAULT_PURGE_BATCH

logger = logging.getLogger("idempotency_django.outbox")

DEFAULT_BATCH_SIZE = 100
BACKOFF_BASE = timedelta(seconds=5)
BACKOFF_CAP = timedelta(minutes=10)
Publisher = Callable[[OutboxMessage], None]
#: The on_commit fast path's bound on each step of a publish (connect, send, confirm), in
#: seconds: a broker that accepts connections and never answers costs about twice this.
FAST_TIMEOUT = 0.05
#: The relay's: it runs off the request path and may wait for a loaded broker.
RELAY_TIMEOUT = 10.0
#: After a failed fast publish, new rows go straight to the relay for this long.
FAST_PATH_PAUSE = 5.0
_paused_until = [0.0]


def publish(row: OutboxMessage, timeout: float | None = None) -> None:
    """Send the row's task to Celery's current app, its key as the task id; return only
    once the broker has it (a confirmed publish, at most ``timeout`` seconds).

    Under ``CELERY_TASK_ALWAYS_EAGER`` (a project run without a broker) a task
    the app knows runs here and now instead, as ``.delay()`` would.
    """
    from celery import current_app

    if current_app.conf.task_always_eager and row.task in current_app.tasks:
        task = current_app.tasks[row.task]
        task.apply(args=row.args, kwargs=row.kwargs, task_id=row.key, **row.options)
        return
    from idempotency_django.outbox import broker

    broker.send(current_app, row, RELAY_TIMEOUT if timeout is None else timeout)


def dispatch(row: OutboxMessage, timeout: float | None = None) -> None:
    """Publish one row where it belongs: to its ``django.tasks`` backend, else to Celery.

    ``timeout`` bounds a Celery publish (:func:`publish`); a ``django.tasks``
    backend's ``enqueue()`` has no such bound.
    """
    chosen = backends.django_tasks_options(row)
    if chosen is None:
        publish(row, timeout)
    else:
        backends.enqueue_django_task(row, chosen)


def publish_after_commit(pk: int, using: str) -> None:
    """The fast path, run by ``on_commit``: publish one row now, never raise.

    Bounded: one try of at most ``FAST_TIMEOUT``; after a failure this process
    leaves new rows to the relay for ``FAST_PATH_PAUSE`` (a broker outage costs
    the first request at most ``FAST_TIMEOUT``, the others nothing).
    """
    if time.monotonic() < _paused_until[0]:
        return
    try:
        with transaction.atomic(using=using):
            rows = _locked(using).filter(pk=pk)
            for row in rows:
                fast = functools.partial(dispatch, timeout=FAST_TIMEOUT)
                if not _deliver(row, using, fast, how="fast"):
                    _paused_until[0] = time.monotonic() + FAST_PATH_PAUSE
    except Exception:
        # The row stays pending: the relay publishes it. The request's answer stands.
        logger.warning("outbox: could not publish row %s after commit", pk, exc_info=True)


def relay(
    using: str | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    publisher: Publisher | None = None,
    ignore_schedule: bool = False,
    on_batch: Callable[[int], None] | None = None,
) -> dict[str, int]:
    """Publish due pending rows in batches, each at most once per run; returns the counts.

    ``ignore_schedule`` also takes rows still within the fast path's grace period
    (tests, and a relay run by hand after a crash). ``on_batch(rows)`` is called after
    each batch's transaction has committed, with the rows it tried.
    """
    alias = using or default_alias()
    counts = {"sent": 0, "failed": 0}
    # A failed row stays pending (and, ignoring the schedule, selectable): each run
    # tries it once, or a broker that is down would hold the run forever.
    tried: list[int] = []
    while True:
        sent, failed = _relay_batch(
            alias, batch_size, publisher or dispatch, ignore_schedule, tried
        )
        counts["sent"] += sent
        counts["failed"] += failed
        if on_batch is not None:
            on_batch(sent + failed)
        if sent + failed < batch_size:
            return counts


def _relay_batch(
    using: str, batch_size: int, publisher: Publisher, ignore_schedule: bool, tried: list[int]
) -> tuple[int, int]:
    sent = failed = 0
    with transaction.atomic(using=using):
        due = _due(_locked(using), ignore_schedule).exclude(pk__in=tried)
        for row in due.order_by("next_attempt_at", "pk")[:batch_size]:
            if _deliver(row, using, publisher, how="relay"):
                sent += 1
            else:
                failed += 1
                tried.append(row.pk)
    return sent, failed


def due(using: str, ignore_schedule: bool = False) -> Any:
    """The rows a relay run would take (unlocked: for counting)."""
    pending = OutboxMessage.objects.using(using).filter(sent_at__isnull=True, dead_at__isnull=True)
    return _due(pending, ignore_schedule)


def _due(rows: Any, ignore_schedule: bool) -> Any:
    return rows if ignore_schedule else rows.filter(next_attempt_at__lte=Now())


def _locked(using: str) -> Any:
    # skip_locked is ignored where SELECT ... FOR UPDATE is unsupported (SQLite,
    # whose writers are serialised anyway).
    return (
        OutboxMessage.objects.using(using)
        .select_for_update(skip_locked=True)
        .filter(sent_at__isnull=True, dead_at__isnull=True)
    )


def _deliver(row: OutboxMessage, using: str, publisher: Publisher, how: str) -> bool:
    try:
        publisher(row)
    except Exception as exc:  # noqa: BLE001 - any broker error leaves the row pending for the relay
        _mark_failed(row, using, exc)
        signals.send(
            signals.outbox_failed, sender=how, task=row.task, attempts=row.attempts + 1, error=exc
        )
        return False
    OutboxMessage.objects.using(using).filter(pk=row.pk).update(
        sent_at=Now(), attempts=F("attempts") + 1, last_error=""
    )
    signals.send(
        signals.outbox_published,
        sender=how,
        task=row.task,
        attempts=row.attempts + 1,
        key_digest=signals.key_digest("", row.key),
    )
    return True


def _mark_failed(row: OutboxMessage, using: str, exc: Exception) -> None:
    logger.warning("outbox: publishing %s failed: %r", row.task, exc)
    delay = min(BACKOFF_CAP, BACKOFF_BASE * 2 ** min(row.failures, 16))
    exhausted = _exhausted(row.failures + 1)
    OutboxMessage.objects.using(using).filter(pk=row.pk).update(
        attempts=F("attempts") + 1,
        failures=F("failures") + 1,
        last_error=repr(exc)[:2000],
        next_attempt_at=ExpressionWrapper(Now() + delay, output_field=DateTimeField()),
        dead_at=Now() if exhausted else None,
        uncertain=may_have_been_taken(exc),
    )
    if exhausted:
        transaction.on_commit(lambda: _dead_lettered(row, exc, using), using=using)


def may_have_been_taken(exc: BaseException) -> bool:
    """Whether a failed publish may have reached the broker anyway: it timed out (waiting
    for the confirm, or for the server's answer), rather than being refused or unsent."""
    seen: BaseException | None = exc
    for _ in range(5):  # the error and what it wraps (kombu's, Celery's)
        if seen is None:
            return False
        if isinstance(seen, TimeoutError) or "Timeout" in type(seen).__name__:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _exhausted(failures: int) -> bool:
    cap = conf.OUTBOX_MAX_ATTEMPTS
    return cap is not None and failures >= cap


def _dead_lettered(row: OutboxMessage, exc: Exception, using: str) -> None:
    digest = signals.key_digest("", row.key)
    uncertain = may_have_been_taken(exc)
    logger.error(
        "outbox: %s [key %s] dead-lettered after %d failed publishes (last: %r); "
        "send it again or discard it in the admin",
        row.task,
        digest,
        row.failures + 1,
        exc,
    )
    signals.send(
        signals.dead_lettered,
        sender="outbox",
        key_digest=digest,
        attempts=row.failures + 1,
        error=exc,
        # Refused or never sent: no consumer ran it. Its confirm timed out: the broker
        # may have it, and "send again" may be a second delivery.
        uncertain=uncertain,
    )
    if uncertain:
        signals.uncertain("dead_letter", using, key_digest=digest)


def send_again(pks: list[int], using: str | None = None) -> int:
    """Put dead-lettered rows back for the relay, due now, their key unchanged; the count."""
    return (
        OutboxMessage.objects.using(using or default_alias())
        .filter(pk__in=pks, dead_at__isnull=False, sent_at__isnull=True)
        .update(dead_at=None, failures=0, next_attempt_at=Now(), uncertain=False)
    )


def discard(pks: list[int], using: str | None = None) -> int:
    """Delete dead-lettered rows (never published): the count."""
    rows = OutboxMessage.objects.using(using or default_alias())
    return int(rows.filter(pk__in=pks, dead_at__isnull=False).delete()[0])


@dataclass(frozen=True)
class OutboxStats:
    """What an operator watches: a growing ``pending`` or ``oldest_pending_seconds`` means
    the broker or the relay is down; ``failing`` counts pending rows whose last publish failed;
    ``dead`` the rows given up on (``IDEMPOTENCY_OUTBOX_MAX_ATTEMPTS``), waiting for an operator."""

    pending: int
    oldest_pending_seconds: float
    failing: int
    failures: int
    dead: int = 0


def stats(using: str | None = None) -> OutboxStats:
    """Pending rows, the oldest one's age (database clock), rows failing, failed publishes."""
    alias = using or default_alias()
    unsent = OutboxMessage.objects.using(alias).filter(sent_at__isnull=True)
    alive = Q(dead_at__isnull=True)
    found = unsent.aggregate(
        pending=Count("pk", filter=alive),
        failing=Count("pk", filter=alive & Q(failures__gt=0)),
        failures=Sum("failures", filter=alive),
        dead=Count("pk", filter=~alive),
    )
    oldest = 0.0
    if found["pending"]:
        oldest = _oldest_age(unsent.filter(alive))
    return OutboxStats(
        found["pending"], oldest, found["failing"], found["failures"] or 0, found["dead"]
    )


def _oldest_age(pending: Any) -> float:
    # The row's time and the database's clock read in one query, through one field's
    # converters: both aware or both naive (USE_TZ = False), on every backend.
    now = ExpressionWrapper(Now(), output_field=DateTimeField())
    row = pending.order_by("created_at").annotate(now=now).values_list("created_at", "now")[:1]
    found = row.first()
    if found is None:  # sent meanwhile
        return 0.0
    created, current = found
    age: timedelta = current - created
    return max(0.0, age.total_seconds())


def purge_sent(
    using: str | None = None,
    older_than: float | timedelta | None = None,
    batch_size: int = DEFAULT_PURGE_BATCH,
) -> int:
    """Delete rows sent longer than ``older_than`` ago (default ``IDEMPOTENCY_TTL``).

    A batch of at most ``batch_size`` rows per statement, as the entries' purge
    does: no statement holds a big table's row locks for long.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    alias = using or default_alias()
    age = conf.TTL if older_than is None else as_timedelta(older_than)
    cutoff = ExpressionWrapper(Now() - age, output_field=DateTimeField())
    rows = OutboxMessage.objects.using(alias)
    sent = rows.filter(sent_at__lt=cutoff).order_by("sent_at").values_list("pk", flat=True)
    deleted = 0
    while True:
        batch = list(sent[:batch_size])
        if batch:
            deleted += rows.filter(pk__in=batch).delete()[0]
        if len(batch) < batch_size:
            return deleted
