"""PostgreSQL's part of both protocols: one-statement claims guarded by an advisory lock.

The advisory lock id is a keyed 64-bit hash of (tenant, key) (``Target.lock_id``).
Two keys whose hashes collide only cost each other a false 409 while both are
in flight: the unique (tenant, key) index, not the lock, decides who runs.
Transaction-scoped advisory locks are released at commit or rollback, so they
work behind PgBouncer in transaction pooling mode.
https://www.postgresql.org/docs/current/explicit-locking.html#ADVISORY-LOCKS
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from idempotency_django._storage.store import carry
from idempotency_django._storage.store.sql import (
    BUSY,
    Claim,
    Found,
    Target,
    cached_sql,
    existing,
    insert_params,
    insert_sql,
    row_sql,
    table,
    where_key,
)

LOCK_ID = "%s::bigint"
# The claim alone may commit without waiting for its WAL flush. It only has to be
# durable once the business transaction commits, and that (synchronous) commit
# flushes all WAL written before it, the claim's included: a crash can lose an
# unanswered claim, never one whose execution committed.
# https://www.postgresql.org/docs/current/wal-async-commit.html
_RELAXED = "WHERE set_config('synchronous_commit', 'off', true) IS NOT NULL"
# A transaction of ours left idle (its client vanished behind a partition) is
# ended by PostgreSQL after this long, instead of holding its key for as long
# as TCP keepalives take to notice (two hours by default).
IDLE_BOUND = "set_config('idle_in_transaction_session_timeout', %s, true)"
_INSERTED, _EXISTING, _BUSY = 1, 2, 3


def claim(target: Target, owner: uuid.UUID, *, relaxed: bool, bounded: bool) -> Found:
    """One round trip: take the key's advisory lock, insert if we got it, else show the row."""
    conn = connections[target.using]
    name = f"pg-claim:{relaxed}:{bounded}"
    sql = cached_sql(conn, name, lambda: _claim_sql(conn, relaxed, bounded))
    params: list[Any] = [target.lock_id, *idle_params(target)[: int(bounded)]]
    params += [*insert_params(conn, target, owner), target.tenant, target.key]
    with conn.cursor() as cursor:
        carry.first(cursor, sql, params)
        rows = {row[0]: tuple(row[1:]) for row in cursor.fetchall()}
    if _INSERTED in rows:
        return Claim(target.using, target.tenant, target.key, owner)
    if _EXISTING in rows:
        seen = existing(rows[_EXISTING])
        # A final answer can be replayed (or refused) whoever holds the lock.
        in_flight = _BUSY in rows and (seen.response is None or seen.dead)
        return BUSY if in_flight else seen
    # Not visible to this statement's snapshot: committed after it began. Look again.
    return BUSY if _BUSY in rows else None


def _claim_sql(conn: BaseDatabaseWrapper, relaxed: bool, bounded: bool) -> str:
    bound = f", {IDLE_BOUND} AS bound" if bounded else ""
    nulls = ", ".join(["NULL"] * 8)
    inserted = insert_sql(conn, select="WHERE (SELECT got FROM lk)", returning=" RETURNING 1")
    return (
        f"WITH lk AS (SELECT pg_try_advisory_xact_lock({LOCK_ID}) AS got{bound}), "
        f"ins AS ({inserted}) "
        f"SELECT {_EXISTING}, {row_sql(conn)} FROM {table(conn)} WHERE {where_key(conn)} "
        f"UNION ALL SELECT {_INSERTED}, {nulls} FROM ins {_RELAXED if relaxed else ''} "
        f"UNION ALL SELECT {_BUSY}, {nulls} FROM lk WHERE NOT got"
    )


def idle_params(target: Target) -> list[str]:
    idle = target.idle or target.lease
    return [str(max(1, int(idle.total_seconds() * 1000)))]


def wait_for_lock(target: Target, seconds: float) -> bool:
    """Block until the key's holder commits or rolls back, at most ``seconds``; whether it did.

    In a savepoint (or its own transaction), so that a lock timeout leaves the
    caller's transaction usable. The lock taken is held to the end of the
    transaction: the claim that follows takes it again at once.
    """
    conn = connections[target.using]
    timeout = f"{max(1, int(seconds * 1000))}ms"
    try:
        with transaction.atomic(using=target.using), conn.cursor() as cursor:
            cursor.execute(
                "SELECT current_setting('lock_timeout'), set_config('lock_timeout', %s, true)",
                [timeout],
            )
            previous = cursor.fetchone()[0]
            cursor.execute(f"SELECT pg_advisory_xact_lock({LOCK_ID})", [target.lock_id])
            cursor.execute("SELECT set_config('lock_timeout', %s, true)", [previous])
    except Exception as exc:
        # lock_not_available (our lock_timeout), or query_canceled (the server's
        # statement_timeout, shorter than the wait): the holder is still at it.
        if sqlstate(exc) in ("55P03", CANCELED):
            return False
        raise
    return True


# Answers that mean "somebody else is at this key right now": retry later.
# 40001 serialization_failure (REPEATABLE READ / SERIALIZABLE claims),
# 40P01 deadlock_detected, 55P03 lock_not_available.
BUSY_STATES = frozenset({"40001", "40P01", "55P03"})
# What a transaction may meet at its last statements or its COMMIT under
# SERIALIZABLE: it rolled back whole, and a retry may well succeed.
SERIALIZATION_STATES = frozenset({"40001", "40P01"})
CANCELED = "57014"  # query_canceled: statement_timeout (or pg_cancel_backend)


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a database error, whether Django wrapped it or not."""
    for error in (exc, exc.__cause__):
        state = getattr(error, "sqlstate", None)
        if isinstance(state, str):
            return state
    return None
