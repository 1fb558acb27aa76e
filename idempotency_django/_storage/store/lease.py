"""The lease protocol (0.1.0's; every database): the claim commits first, then the view runs.

A duplicate sees the committed in-progress row and gets 409 while the lease holds.
The business transaction then takes the row lock (``hold``); a request that
outlives its lease keeps that lock, so no takeover or purge can touch its row.
A worker that dies leaves its committed claim behind until the lease passes.
"""

from __future__ import annotations

import uuid

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from idempotency_django._storage.store import carry, mysql, pg, sql
from idempotency_django._storage.store.sql import (
    Claim,
    Found,
    Target,
    cached_sql,
    insert_params,
    insert_sql,
    is_mysql,
    is_postgres,
    later_param,
    later_sql,
    owner_param,
    q,
    read,
    release,
    table,
    where_owner,
)

NAME = "lease"
CLAIMS_IN_TRANSACTION = False


def claim(target: Target, bounded: bool) -> Found:
    """Insert an in-progress entry (it commits at once), or return what holds the key."""
    conn = connections[target.using]
    owner = uuid.uuid4()
    if is_postgres(conn):
        # Relaxed only in autocommit: inside a caller's transaction the local
        # setting would relax the whole transaction's commit.
        return pg.claim(target, owner, relaxed=conn.get_autocommit(), bounded=False)
    if is_mysql(conn):
        return mysql.claim(target, owner)
    return _claim_generic(conn, target, owner)


def _claim_generic(conn: BaseDatabaseWrapper, target: Target, owner: uuid.UUID) -> Found:
    # SQLite serialises writers: the INSERT would queue behind a running request's
    # transaction. Reading first lets a duplicate of that request see its claim and
    # get 409 at once; the INSERT … ON CONFLICT still decides who claims.
    seen = read(target)
    if seen is not None:
        return seen
    insert = cached_sql(conn, "claim:insert", lambda: insert_sql(conn))
    with conn.cursor() as cursor:
        cursor.execute(insert, insert_params(conn, target, owner))
        inserted = cursor.rowcount == 1
    return Claim(target.using, target.tenant, target.key, owner) if inserted else read(target)


def hold(claim: Claim, target: Target, bounded: bool) -> bool:
    """First in the business transaction: the claim's row lock; ``False`` if taken over."""
    conn = connections[claim.using]
    if is_mysql(conn):
        return mysql.hold(claim)
    fence = [claim.tenant, claim.key, owner_param(conn, claim.owner)]
    with conn.cursor() as cursor:
        if conn.features.has_select_for_update:
            bound = pg.IDLE_BOUND if bounded else "1"
            params = [*pg.idle_params(target)[: int(bounded)], *fence]
            sql = f"SELECT {bound} FROM {table(conn)} WHERE {where_owner(conn)} FOR UPDATE"
            carry.first(cursor, sql, params)  # PostgreSQL: carries the BEGIN
            return cursor.fetchone() is not None
        # SQLite has no row locks: a write takes the database's write lock instead.
        cursor.execute(
            f"UPDATE {table(conn)} SET {q(conn, 'locked_until')} = {later_sql(conn)} "
            f"WHERE {where_owner(conn)}",
            [later_param(conn, target.lease), *fence],
        )
        return bool(cursor.rowcount == 1)


def take_over(target: Target) -> Claim | None:
    """Claim a dead entry afresh; ``None`` if it is alive, held by a live transaction, or gone."""
    if is_mysql(connections[target.using]):
        return mysql.take_over(target)
    return sql.take_over(target)


__all__ = ["NAME", "claim", "hold", "release", "take_over"]
