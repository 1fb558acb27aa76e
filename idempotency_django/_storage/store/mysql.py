"""MySQL's and MariaDB's part of the lease protocol (InnoDB): claim, hold, takeover, purge batch.

InnoDB differs from PostgreSQL in three ways that shape these statements:

- A duplicate INSERT checks the unique (tenant, key) index under a shared lock
  on the existing index record, so it *waits* for any transaction holding that
  record instead of failing. ``hold`` therefore locks the entry through its
  primary key only (a locking read does not lock the rows its subquery reads),
  so a duplicate's INSERT fails with 1062 at once while the view runs.
- ``UPDATE``/``DELETE`` cannot select their rows from the same table in a
  subquery (error 1093), nor use ``LIMIT`` in an ``IN`` subquery: the takeover
  joins a derived table that picks its row with ``FOR UPDATE SKIP LOCKED``
  (MySQL 8.0.1+, MariaDB 10.6+); the purge picks a batch so, then deletes it by
  id, in one short transaction.
- There is no transaction-scoped advisory lock (``GET_LOCK`` belongs to the
  session and survives a rollback): only ``"lease"`` runs here
  (docs/protocols.rst says why).

The clock is ``UTC_TIMESTAMP(6)`` (``sql.now_sql``), never ``NOW()``, which
follows the session's ``time_zone``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import IntegrityError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from idempotency_django._storage.store.sql import (
    IN_PROGRESS,
    Claim,
    Found,
    Target,
    cached_sql,
    dead_sql,
    insert_params,
    insert_sql,
    later_param,
    later_sql,
    now_sql,
    owner_param,
    q,
    read,
    table,
    where_key,
    where_owner,
)

DUPLICATE_KEY = 1062  # ER_DUP_ENTRY
# Answers that mean "somebody else is at this key right now": retry later (409).
# 1205 lock wait timeout (also MariaDB's NOWAIT), 1213 deadlock, 3572 MySQL's NOWAIT.
BUSY_ERRORS = frozenset({1205, 1213, 3572})


def errno(exc: BaseException) -> int | None:
    """The server's error number of a MySQLdb error, whether Django wrapped it or not."""
    for error in (exc, exc.__cause__):
        args = getattr(error, "args", ())
        if args and isinstance(args[0], int):
            return args[0]
    return None


def busy(exc: BaseException) -> bool:
    """Whether a database error means another transaction holds the key (409, not 503)."""
    return errno(exc) in BUSY_ERRORS


# ER_NET_PACKET_TOO_LARGE, and what the client sees when the server drops the
# connection over it (CR_SERVER_GONE_ERROR / CR_SERVER_LOST with the packet named).
PACKET_TOO_LARGE = 1153


def packet_too_large(exc: BaseException) -> bool:
    """Whether the server refused a statement for exceeding ``max_allowed_packet``."""
    return errno(exc) == PACKET_TOO_LARGE or "max_allowed_packet" in str(exc)


def claim(target: Target, owner: uuid.UUID) -> Found:
    """Insert an in-progress entry, or return what holds the key (one statement if new)."""
    conn = connections[target.using]
    nowait = conn.in_atomic_block
    if nowait:
        # In a caller's transaction a failed INSERT keeps its shared lock on the
        # key's index record until that transaction ends, which would stall the
        # holder's record(): look before inserting.
        seen = read(target)
        if seen is not None:
            return seen
    try:
        with conn.cursor() as cursor, _no_lock_wait(conn, cursor, nowait) as insert:
            cursor.execute(insert, insert_params(conn, target, owner))
    except IntegrityError as exc:
        if errno(exc) != DUPLICATE_KEY:
            raise
        return read(target)
    return Claim(target.using, target.tenant, target.key, owner)


@contextmanager
def _no_lock_wait(conn: BaseDatabaseWrapper, cursor: Any, nowait: bool) -> Iterator[str]:
    """The claim's INSERT; with ``nowait``, one that fails (1205: 409) instead of queueing.

    In a caller's transaction (``ATOMIC_REQUESTS`` with a wrapper above us that
    hid our ``_non_atomic_requests``, e.g. DRF's ``@api_view``) a holder's claim is
    an uncommitted row, and a duplicate's INSERT would wait on its index record for
    up to ``innodb_lock_wait_timeout`` (50 s), pinning a worker: PostgreSQL's claim
    answers 409 at once there (its advisory lock is only *tried*), and so does this.
    MariaDB bounds one statement (``SET STATEMENT``, 0 is NOWAIT); MySQL has neither,
    so its session's timeout is set to its minimum (1 s) around the INSERT.
    """
    insert = cached_sql(conn, "claim:insert", lambda: insert_sql(conn))
    if not nowait:
        yield insert
    elif conn.mysql_is_mariadb:  # type: ignore[attr-defined]
        yield f"SET STATEMENT innodb_lock_wait_timeout = 0 FOR {insert}"
    else:
        cursor.execute(_MYSQL_SHORT_WAIT)
        try:
            yield insert
        finally:
            cursor.execute(_MYSQL_RESTORE_WAIT)


_MYSQL_SHORT_WAIT = (
    "SET @idempotency_lock_wait = @@innodb_lock_wait_timeout, innodb_lock_wait_timeout = 1"
)
_MYSQL_RESTORE_WAIT = "SET innodb_lock_wait_timeout = @idempotency_lock_wait"


def hold(claim: Claim) -> bool:
    """First in the business transaction: the claim's row lock; ``False`` if taken over.

    Through the primary key only (see above), the owner checked again on the
    locked row: the subquery's plain read may predate a takeover.
    """
    conn = connections[claim.using]
    sql = cached_sql(conn, "mysql:hold", lambda: _hold_sql(conn))
    owner = owner_param(conn, claim.owner)
    with conn.cursor() as cursor:
        cursor.execute(sql, [claim.tenant, claim.key, owner, owner])
        return cursor.fetchone() is not None


def _hold_sql(conn: BaseDatabaseWrapper) -> str:
    pk = q(conn, "id")
    return (
        f"SELECT 1 FROM {table(conn)} WHERE {pk} = (SELECT {pk} FROM {table(conn)} "
        f"WHERE {where_owner(conn)}) AND {q(conn, 'owner')} = %s FOR UPDATE"
    )


def take_over(target: Target) -> Claim | None:
    """Claim a dead entry afresh; ``None`` if it is alive, held by a live transaction, or gone.

    One statement: the derived table picks the row with ``SKIP LOCKED`` (a
    request that outlived its lease still holds its row lock), the join
    updates it by id (MySQL refuses a subquery on the updated table itself).
    """
    conn = connections[target.using]
    sql = cached_sql(conn, "mysql:take_over", lambda: _take_over_sql(conn))
    owner = uuid.uuid4()
    params = [target.tenant, target.key, target.fingerprint, owner_param(conn, owner)]
    params += [later_param(conn, target.lease), later_param(conn, target.ttl)]
    with conn.cursor() as cursor:
        cursor.execute(sql, params)
        taken = cursor.rowcount == 1
    return Claim(target.using, target.tenant, target.key, owner) if taken else None


def _take_over_sql(conn: BaseDatabaseWrapper) -> str:
    pk = q(conn, "id")
    dead = (
        f"SELECT {pk} FROM {table(conn)} WHERE {where_key(conn)} "
        f"AND {dead_sql(conn, now_sql(conn))} FOR UPDATE SKIP LOCKED"
    )
    return (
        f"UPDATE {table(conn)} JOIN ({dead}) AS dead USING ({pk}) SET "
        f"{q(conn, 'fingerprint')} = %s, "
        f"{q(conn, 'status')} = '{IN_PROGRESS}', {q(conn, 'owner')} = %s, "
        f"{q(conn, 'response_status')} = NULL, {q(conn, 'response_reason')} = '', "
        f"{q(conn, 'response_headers')} = '[]', {q(conn, 'response_body')} = NULL, "
        f"{q(conn, 'locked_until')} = {later_sql(conn)}, {q(conn, 'created_at')} = "
        f"{now_sql(conn)}, {q(conn, 'expires_at')} = {later_sql(conn)}"
    )


def delete_batch(
    alias: str, where: str, params: list[Any], order: str, limit: int
) -> tuple[int, Any]:
    """Delete at most ``limit`` unlocked rows matching ``where``; the count and the frontier.

    The frontier is the largest ``order`` deleted (``purge._from``).
    """
    conn = connections[alias]
    tbl, pk = table(conn), q(conn, "id")
    pick = f"SELECT {pk}, {order} FROM {tbl} WHERE {where} ORDER BY {order} LIMIT %s"
    with transaction.atomic(using=alias), conn.cursor() as cursor:
        cursor.execute(f"{pick} FOR UPDATE SKIP LOCKED", [*params, limit])
        rows = cursor.fetchall()
        if not rows:
            return 0, None
        cursor.execute(
            f"DELETE FROM {tbl} WHERE {pk} IN ({', '.join(['%s'] * len(rows))})",
            [row[0] for row in rows],
        )
        return int(cursor.rowcount), max(row[1] for row in rows)


__all__ = ["BUSY_ERRORS", "busy", "claim", "delete_batch", "errno", "hold", "take_over"]
