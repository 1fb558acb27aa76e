"""Lifecycle: delete expired entries and reclaim abandoned claims, a short batch at a time.

Reclaiming an abandoned claim is deleting its entry: the key then behaves as new.
On PostgreSQL every batch picks its rows with ``SKIP LOCKED``. A request that
outlived its lease still holds its row lock (``store.lease.hold``) until its transaction
ends, so its row is skipped: never waited on, never deleted. SQLite has no row
locks but serialises writers: a purge statement runs only once the request has
committed, when its entry is final and no longer matches.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from idempotency_django import signals
from idempotency_django._operations import progress
from idempotency_django._storage.store import mysql, sql
from idempotency_django.databases import default_alias

logger = logging.getLogger("idempotency_django")
DEFAULT_BATCH_SIZE = 1000
BatchHook = Callable[[int], None]  # called after each batch with its rows


@dataclass(frozen=True)
class PurgeResult:
    """What a purge deleted (or, under ``dry_run``, would delete)."""

    expired: int
    abandoned: int
    dry_run: bool = False

    def as_dict(self) -> dict[str, int]:
        return {"expired": self.expired, "abandoned": self.abandoned}


@dataclass(frozen=True)
class _Selection:
    """A WHERE clause with its parameters, and the indexed column to walk it by."""

    where: str
    params: list[Any]
    order: str


def purge(
    using: str | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    dry_run: bool = False,
    now: datetime | None = None,
    on_batch: BatchHook | None = None,
) -> PurgeResult:
    """Delete expired entries, then abandoned in-progress ones; return the counts.

    ``using`` defaults to ``IDEMPOTENCY_DATABASE``; each batch of at most
    ``batch_size`` rows is one short statement. ``dry_run`` counts instead.
    ``on_batch(rows)`` is called after each batch (deleted, or counted).
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    conn = connections[using or default_alias()]
    started = time.monotonic()
    run = functools.partial(_count if dry_run else _delete, on_batch=on_batch or _nothing)
    result = PurgeResult(
        expired=run(conn, _expired(conn, now), batch_size),
        abandoned=run(conn, _abandoned(conn, now), batch_size),
        dry_run=dry_run,
    )
    if not dry_run:
        _run_steps(conn.alias, batch_size)
    _report(conn.alias, result, time.monotonic() - started)
    return result


def estimate(using: str | None = None) -> int | None:
    """About how many entries a purge would delete now, without counting a big table
    (:func:`idempotency_django._operations.progress.estimate`); ``None`` when unknown."""
    conn = connections[using or default_alias()]
    found = [
        progress.estimate(conn.alias, f"SELECT 1 FROM {sql.table(conn)} WHERE {s.where}", s.params)
        for s in (_expired(conn, None), _abandoned(conn, None))
    ]
    return None if None in found else sum(n for n in found if n is not None)


def _nothing(rows: int) -> None:
    pass


# A feature app's own cleanup, run after the entries' by every purge but a dry run:
# the app registers it from its AppConfig.ready(), so this module imports no feature.
PurgeStep = Callable[[str, int], int]  # (database alias, batch size) -> rows deleted
_steps: dict[str, PurgeStep] = {}


def register_step(what: str, step: PurgeStep) -> None:
    """Run ``step(alias, batch_size)`` in every purge; ``what`` names its rows in the log.

    Registering the same ``what`` again replaces the step (``ready()`` may run twice).
    """
    _steps[what] = step


def _run_steps(alias: str, batch_size: int) -> None:
    for what, step in list(_steps.items()):
        deleted = step(alias, batch_size)
        if deleted:
            logger.info("idempotency purge on %r: %d %s deleted", alias, deleted, what)


def _report(alias: str, result: PurgeResult, seconds: float) -> None:
    if result.abandoned and not result.dry_run:
        signals.send(
            signals.entry_reclaimed,
            sender="purge",
            how="purge",
            count=result.abandoned,
            database=alias,
        )
        signals.uncertain("purge", alias, count=result.abandoned)
    signals.send(
        signals.purge_finished,
        sender="purge",
        expired=result.expired,
        abandoned=result.abandoned,
        dry_run=result.dry_run,
        database=alias,
        seconds=seconds,
    )


def release(ids: Iterable[int], using: str | None = None, now: datetime | None = None) -> int:
    """Delete those of ``ids`` that are in progress past their lease and not held; the count."""
    conn = connections[using or default_alias()]
    stuck = _lease_passed(conn, now)
    released = 0
    for chunk in _chunks(list(ids), DEFAULT_BATCH_SIZE):
        marks = ", ".join(["%s"] * len(chunk))
        where = f"{stuck.where} AND {_q(conn, 'id')} IN ({marks})"
        selection = _Selection(where, [*stuck.params, *chunk], stuck.order)
        released += _delete_batch(conn, selection, len(chunk))[0]
    if released:
        signals.send(
            signals.entry_reclaimed,
            sender="admin",
            how="admin",
            count=released,
            database=conn.alias,
        )
        signals.uncertain("admin", conn.alias, count=released)
    return released


def _q(conn: BaseDatabaseWrapper, name: str) -> str:
    return str(conn.ops.quote_name(name))


def _clock(conn: BaseDatabaseWrapper, now: datetime | None) -> tuple[str, list[Any]]:
    """The database's clock, unless the caller names a time (tests, benchmarks)."""
    if now is None:
        return sql.now_sql(conn), []
    return "%s", [conn.ops.adapt_datetimefield_value(now)]


def _expired(conn: BaseDatabaseWrapper, now: datetime | None) -> _Selection:
    at, params = _clock(conn, now)
    return _Selection(sql.expired_sql(conn, at), params, _q(conn, "expires_at"))


def _lease_passed(conn: BaseDatabaseWrapper, now: datetime | None) -> _Selection:
    at, params = _clock(conn, now)
    return _Selection(sql.lease_over_sql(conn, at), params, _q(conn, "locked_until"))


def _abandoned(conn: BaseDatabaseWrapper, now: datetime | None) -> _Selection:
    # Not yet expired, so that no entry counts as both kinds (dry runs add up).
    at, params = _clock(conn, now)
    where = f"{sql.lease_over_sql(conn, at)} AND {_q(conn, 'expires_at')} > {at}"
    return _Selection(where, [*params, *params], _q(conn, "locked_until"))


def _delete(
    conn: BaseDatabaseWrapper, selection: _Selection, batch_size: int, on_batch: BatchHook
) -> int:
    total, frontier = 0, None
    while True:
        deleted, frontier = _delete_batch(conn, _from(selection, frontier), batch_size)
        total += deleted
        on_batch(deleted)
        if deleted < batch_size:
            return total


def _from(selection: _Selection, frontier: Any) -> _Selection:
    """``selection`` from ``frontier`` on: what lies before it is gone, or held (next run's).

    Starting each batch at the last one's frontier spares it walking the index
    over the entries of every row deleted so far. ``>=``: a batch may end inside
    a run of equal values.
    """
    if frontier is None:
        return selection
    where = f"{selection.where} AND {selection.order} >= %s"
    return _Selection(where, [*selection.params, frontier], selection.order)


def _delete_batch(conn: BaseDatabaseWrapper, selection: _Selection, limit: int) -> tuple[int, Any]:
    """One autocommit statement deleting at most ``limit`` rows of ``selection``.

    Returns the count and, on PostgreSQL, the frontier: the largest ``order`` deleted.
    """
    table, pk, order = sql.table(conn), _q(conn, "id"), selection.order
    pick = f"SELECT {pk} FROM {table} WHERE {selection.where} ORDER BY {order} LIMIT %s"
    params = [*selection.params, limit]
    if conn.vendor == "mysql":
        return mysql.delete_batch(conn.alias, selection.where, selection.params, order, limit)
    with conn.cursor() as cursor:
        if conn.vendor != "postgresql":
            cursor.execute(f"DELETE FROM {table} WHERE {pk} IN ({pick})", params)
            return int(cursor.rowcount), None
        # ORDER BY keeps every batch on the index, whatever the planner thinks of
        # a seq scan; = ANY(ARRAY(...)) deletes through the primary key, not a join.
        cursor.execute(
            f"WITH gone AS (DELETE FROM {table} WHERE {pk} = ANY(ARRAY("
            f"{pick} FOR UPDATE SKIP LOCKED)) RETURNING {order}) "
            f"SELECT count(*), max({order}) FROM gone",
            params,
        )
        deleted, frontier = cursor.fetchone()
        return int(deleted), frontier


def _count(
    conn: BaseDatabaseWrapper, selection: _Selection, batch_size: int, on_batch: BatchHook
) -> int:
    total, after = 0, 0
    while True:
        ids = _count_batch(conn, selection, after, batch_size)
        total += len(ids)
        on_batch(len(ids))
        if len(ids) < batch_size:
            return total
        after = ids[-1]


def _count_batch(
    conn: BaseDatabaseWrapper, selection: _Selection, after: int, limit: int
) -> list[int]:
    """The ids a delete batch would take after ``after``, without deleting or keeping a lock."""
    pk = _q(conn, "id")
    query = (
        f"SELECT {pk} FROM {sql.table(conn)} WHERE {selection.where} AND {pk} > %s "
        f"ORDER BY {pk} LIMIT %s"
    )
    if conn.vendor == "mysql":
        query += " FOR UPDATE SKIP LOCKED"  # held only until the rollback below
    elif conn.vendor == "postgresql":
        # The weakest row lock that a live request's FOR UPDATE still conflicts
        # with: held rows are skipped, as the real purge would skip them.
        query += " FOR KEY SHARE SKIP LOCKED"
    with transaction.atomic(using=conn.alias), conn.cursor() as cursor:
        cursor.execute(query, [*selection.params, after, limit])
        ids = [int(row[0]) for row in cursor.fetchall()]
        transaction.set_rollback(True, using=conn.alias)
    return ids


def _chunks(items: Sequence[int], size: int) -> Iterator[Sequence[int]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


__all__ = ["PurgeResult", "purge", "register_step"]
