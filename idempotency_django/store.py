"""Every SQL statement the protocol issues, one small function each.

PostgreSQL answers "claim or show me the existing entry" in one statement; SQLite
reads first, then inserts (it serialises writers: see ``_claim_generic``). Writes that follow a claim are
fenced on the claim's owner token, so a claim that was taken over can't write.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from idempotency_django.models import IdempotencyEntry
from idempotency_django.responses import StoredResponse

Status = IdempotencyEntry.Status
_COLUMNS = (
    "fingerprint",
    "status",
    "owner",
    "response_status",
    "response_headers",
    "response_body",
    "locked_until",
    "expires_at",
)


@dataclass(frozen=True)
class Claim:
    """A claim this process holds: the (tenant, key) row carrying ``owner``."""

    using: str
    tenant: str
    key: str
    owner: uuid.UUID


@dataclass(frozen=True)
class Existing:
    """An entry somebody else created."""

    fingerprint: str
    status: str
    locked_until: datetime
    expires_at: datetime
    response: StoredResponse | None

    def is_dead(self, now: datetime) -> bool:
        """Past its TTL, or an in-progress claim whose lease has passed."""
        lease_over = self.status == Status.IN_PROGRESS and self.locked_until <= now
        return lease_over or self.expires_at <= now


def table(conn: BaseDatabaseWrapper) -> str:
    """The entries' table name, quoted for ``conn``."""
    return str(conn.ops.quote_name(IdempotencyEntry._meta.db_table))


def _select_list(conn: BaseDatabaseWrapper) -> str:
    return ", ".join(conn.ops.quote_name(c) for c in _COLUMNS)


def _dt(conn: BaseDatabaseWrapper, value: datetime) -> Any:
    return conn.ops.adapt_datetimefield_value(value)


def _aware(value: datetime | str) -> datetime:
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _uuid(conn: BaseDatabaseWrapper, value: uuid.UUID) -> Any:
    return value if conn.features.has_native_uuid_field else value.hex


def _new_row(
    conn: BaseDatabaseWrapper,
    tenant: str,
    key: str,
    fingerprint: str,
    owner: uuid.UUID,
    now: datetime,
    lease: timedelta,
    ttl: timedelta,
) -> list[Any]:
    return [
        tenant,
        key,
        fingerprint,
        Status.IN_PROGRESS,
        _uuid(conn, owner),
        "[]",
        _dt(conn, now + lease),
        _dt(conn, now),
        _dt(conn, now + ttl),
    ]


_INSERT_COLUMNS = (
    "tenant",
    "key",
    "fingerprint",
    "status",
    "owner",
    "response_headers",
    "locked_until",
    "created_at",
    "expires_at",
)


def _insert_sql(conn: BaseDatabaseWrapper, returning: str = "") -> str:
    cols = ", ".join(conn.ops.quote_name(c) for c in _INSERT_COLUMNS)
    marks = ", ".join(["%s"] * len(_INSERT_COLUMNS))
    return (
        f"INSERT INTO {table(conn)} ({cols}) VALUES ({marks}) "
        f"ON CONFLICT ({conn.ops.quote_name('tenant')}, {conn.ops.quote_name('key')}) "
        f"DO NOTHING{returning}"
    )


def _where_key(conn: BaseDatabaseWrapper) -> str:
    q = conn.ops.quote_name
    return f"{q('tenant')} = %s AND {q('key')} = %s"


def _where_owner(conn: BaseDatabaseWrapper) -> str:
    return f"{_where_key(conn)} AND {conn.ops.quote_name('owner')} = %s"


def _existing(row: tuple[Any, ...]) -> Existing:
    fields = dict(zip(_COLUMNS, row, strict=True))
    response = None
    if fields["status"] != Status.IN_PROGRESS:
        headers = fields["response_headers"]
        headers = json.loads(headers) if isinstance(headers, str | bytes) else headers
        response = StoredResponse(
            int(fields["response_status"]),
            [(str(k), str(v)) for k, v in headers],
            bytes(fields["response_body"] or b""),
        )
    return Existing(
        fields["fingerprint"],
        fields["status"],
        _aware(fields["locked_until"]),
        _aware(fields["expires_at"]),
        response,
    )


def claim(
    using: str,
    tenant: str,
    key: str,
    fingerprint: str,
    now: datetime,
    lease: timedelta,
    ttl: timedelta,
) -> Claim | Existing | None:
    """Insert an in-progress entry, or return the one already there.

    ``None`` means the conflicting row could not be seen (it committed after this
    statement's snapshot, or was deleted meanwhile): ask again.
    """
    conn = connections[using]
    owner = uuid.uuid4()
    params = _new_row(conn, tenant, key, fingerprint, owner, now, lease, ttl)
    if conn.vendor == "postgresql":
        row = _claim_postgresql(conn, params, tenant, key)
    else:
        row = _claim_generic(conn, params, tenant, key)
    if row is None:
        return None
    if row == ():
        return Claim(using, tenant, key, owner)
    return _existing(row)


def _claim_postgresql(
    conn: BaseDatabaseWrapper, params: list[Any], tenant: str, key: str
) -> tuple[Any, ...] | None:
    # One round trip: the CTE inserts, and the other branch reads the existing row
    # when the insert met a conflict. Both see the statement's snapshot, so a row
    # committed by a concurrent claim after it began is invisible: zero rows.
    relaxed = conn.get_autocommit()
    sql = _cached_sql(conn, f"claim:{relaxed}", lambda: _claim_postgresql_sql(conn, relaxed))
    with conn.cursor() as cursor:
        cursor.execute(sql, [*params, tenant, key])
        row = cursor.fetchone()
    if row is None:
        return None
    return () if row[0] else tuple(row[1:])


# The claim alone commits without waiting for its WAL flush. It only has to be
# durable once the business transaction commits, and that (synchronous) commit
# flushes all WAL written before it, the claim's included: a crash can lose an
# unanswered claim, never one whose execution committed. Evaluated only on the
# inserted row, so reads stay plain. Only in autocommit: inside a caller's
# transaction the local setting would relax the whole transaction's commit.
# https://www.postgresql.org/docs/current/wal-async-commit.html
_RELAXED_COMMIT = "set_config('synchronous_commit', 'off', true) IS NOT NULL"


def _claim_postgresql_sql(conn: BaseDatabaseWrapper, relaxed: bool) -> str:
    inserted = _RELAXED_COMMIT if relaxed else "true"
    return (
        f"WITH ins AS ({_insert_sql(conn, ' RETURNING 1')}) "
        f"SELECT {inserted}, NULL::text, NULL::text, NULL::uuid, NULL::int, NULL::jsonb, "
        f"NULL::bytea, NULL::timestamptz, NULL::timestamptz FROM ins "
        f"UNION ALL SELECT false, {_select_list(conn)} FROM {table(conn)} "
        f"WHERE {_where_key(conn)}"
    )


def _claim_generic(
    conn: BaseDatabaseWrapper, params: list[Any], tenant: str, key: str
) -> tuple[Any, ...] | None:
    # SQLite serialises writers: the INSERT would queue behind a running request's
    # transaction. Reading first lets a duplicate of that request see its claim and
    # get 409 at once; the INSERT … ON CONFLICT still decides who claims.
    read = _cached_sql(conn, "claim:read", lambda: _read_sql(conn))
    insert = _cached_sql(conn, "claim:insert", lambda: _insert_sql(conn))
    with conn.cursor() as cursor:
        cursor.execute(read, [tenant, key])
        row = cursor.fetchone()
        if row is not None:
            return tuple(row)
        cursor.execute(insert, params)
        if cursor.rowcount == 1:
            return ()
        cursor.execute(read, [tenant, key])
        row = cursor.fetchone()
    return None if row is None else tuple(row)


def _read_sql(conn: BaseDatabaseWrapper) -> str:
    return f"SELECT {_select_list(conn)} FROM {table(conn)} WHERE {_where_key(conn)}"


_SQL: dict[tuple[str, str], str] = {}


def _cached_sql(conn: BaseDatabaseWrapper, name: str, build: Callable[[], str]) -> str:
    """``build()`` once per backend: the text only depends on its quoting rules."""
    cache_key = (conn.vendor, name)
    sql = _SQL.get(cache_key)
    if sql is None:
        sql = _SQL[cache_key] = build()
    return sql


def take_over(
    using: str,
    tenant: str,
    key: str,
    fingerprint: str,
    now: datetime,
    lease: timedelta,
    ttl: timedelta,
) -> Claim | None:
    """Claim a dead entry afresh; ``None`` if it is alive, held by a live transaction, or gone.

    ``SKIP LOCKED`` is what makes this safe against a request that outlived its
    lease: its transaction still holds the row lock, so the row is skipped.
    """
    conn = connections[using]
    q = conn.ops.quote_name
    owner = uuid.uuid4()
    dead = f"({q('expires_at')} <= %s OR ({q('status')} = %s AND {q('locked_until')} <= %s))"
    target = f"{_where_key(conn)} AND {dead}"
    if conn.features.has_select_for_update_skip_locked:
        target = (
            f"{q('id')} = (SELECT {q('id')} FROM {table(conn)} WHERE {target} "
            f"FOR UPDATE SKIP LOCKED)"
        )
    sql = (
        f"UPDATE {table(conn)} SET {q('fingerprint')} = %s, {q('status')} = %s, "
        f"{q('owner')} = %s, {q('response_status')} = NULL, {q('response_headers')} = %s, "
        f"{q('response_body')} = NULL, {q('locked_until')} = %s, {q('created_at')} = %s, "
        f"{q('expires_at')} = %s WHERE {target}"
    )
    # The SET columns are the new row's, less its (tenant, key).
    fresh = _new_row(conn, tenant, key, fingerprint, owner, now, lease, ttl)[2:]
    params = [
        *fresh,
        tenant,
        key,
        _dt(conn, now),
        Status.IN_PROGRESS,
        _dt(conn, now),
    ]
    with conn.cursor() as cursor:
        cursor.execute(sql, params)
        taken = bool(cursor.rowcount == 1)
    return Claim(using, tenant, key, owner) if taken else None


def lock(claim: Claim, now: datetime, lease: timedelta) -> bool:
    """Hold the claim's row lock for the rest of the transaction; ``False`` if it was taken over."""
    conn = connections[claim.using]
    params = [claim.tenant, claim.key, _uuid(conn, claim.owner)]
    with conn.cursor() as cursor:
        if conn.features.has_select_for_update:
            cursor.execute(
                f"SELECT 1 FROM {table(conn)} WHERE {_where_owner(conn)} FOR UPDATE", params
            )
            return cursor.fetchone() is not None
        # SQLite has no row locks: a write takes the database's write lock instead.
        q = conn.ops.quote_name
        cursor.execute(
            f"UPDATE {table(conn)} SET {q('locked_until')} = %s WHERE {_where_owner(conn)}",
            [_dt(conn, now + lease), *params],
        )
        return bool(cursor.rowcount == 1)


def record(
    claim: Claim, status: str, response: StoredResponse, now: datetime, ttl: timedelta
) -> bool:
    """Store the final answer, fenced on the owner token."""
    conn = connections[claim.using]
    q = conn.ops.quote_name
    sql = (
        f"UPDATE {table(conn)} SET {q('status')} = %s, {q('response_status')} = %s, "
        f"{q('response_headers')} = %s, {q('response_body')} = %s, {q('locked_until')} = %s, "
        f"{q('expires_at')} = %s WHERE {_where_owner(conn)}"
    )
    params = [
        status,
        response.status,
        json.dumps(response.headers),
        response.body,
        _dt(conn, now),
        _dt(conn, now + ttl),
        claim.tenant,
        claim.key,
        _uuid(conn, claim.owner),
    ]
    with conn.cursor() as cursor:
        cursor.execute(sql, params)
        return bool(cursor.rowcount == 1)


def release(claim: Claim) -> None:
    """Delete the claim so that the key is free again; a recorded answer is kept.

    After an error at COMMIT the answer may have committed all the same (the
    acknowledgement was lost): only a row still in progress is ours to free.
    """
    conn = connections[claim.using]
    with conn.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {table(conn)} WHERE {_where_owner(conn)} "
            f"AND {conn.ops.quote_name('status')} = %s",
            [claim.tenant, claim.key, _uuid(conn, claim.owner), Status.IN_PROGRESS],
        )
