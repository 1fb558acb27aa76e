"""What both protocols share: the entries' rows, the database's clock, and the writes after a claim.

Every time in an entry is the database's: written as ``now`` plus an interval in
the statement itself, compared in the statement itself. App servers' clocks can
disagree by seconds or minutes; the database has one. Python never compares two
datetimes here, so ``USE_TZ = False`` and a database ``TIME_ZONE`` change nothing.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import DataError, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from idempotency_django._protocol.responses import StoredResponse
from idempotency_django._storage import seal
from idempotency_django._storage.store import carry
from idempotency_django.models import IdempotencyEntry

Status = IdempotencyEntry.Status
IN_PROGRESS = Status.IN_PROGRESS.value


@dataclass(frozen=True)
class Target:
    """What one claim is about: a (tenant, key) on a database, and how long to keep it."""

    using: str
    tenant: str
    key: str
    fingerprint: str
    lease: timedelta
    ttl: timedelta
    idle: timedelta | None = None  # IDEMPOTENCY_IDLE_TIMEOUT: see ``pg.IDLE_BOUND``

    @functools.cached_property
    def lock_id(self) -> int:
        """The key's advisory lock id: keyed with the server secret (``secret.lock_id``).

        Computed once per target (a claim, a wait, the claim again: one HMAC).
        """
        from idempotency_django._storage.secret import lock_id

        return lock_id(self.using, self.tenant, self.key)


@dataclass(frozen=True)
class Claim:
    """A claim this process holds: the (tenant, key) row carrying ``owner``."""

    using: str
    tenant: str
    key: str
    owner: uuid.UUID


@dataclass(frozen=True)
class Existing:
    """An entry somebody else created, with the database's verdict on its age."""

    fingerprint: str
    # None while in progress; sealed until a replay opens it (a 0.3 row: plain).
    response: StoredResponse | seal.Sealed | None
    dead: bool  # past its TTL, or in progress with its lease passed
    remaining: float  # seconds until it expires, by the database's clock

    def opened(self, target: Target) -> StoredResponse:
        """The final answer to replay, opened here (the seal is storage's); a 500 problem
        when it does not open. Asked only once the fingerprint matched."""
        assert self.response is not None
        return seal.replayable(target.using, target.tenant, target.key, self.response)


class Busy:
    """Another transaction holds the key's advisory lock: a request in flight."""


BUSY = Busy()
Found = Claim | Existing | Busy | None  # None: the row changed under us; look again


def q(conn: BaseDatabaseWrapper, name: str) -> str:
    return str(conn.ops.quote_name(name))


def table(conn: BaseDatabaseWrapper) -> str:
    """The entries' table name, quoted for ``conn``."""
    return q(conn, IdempotencyEntry._meta.db_table)


def is_postgres(conn: BaseDatabaseWrapper) -> bool:
    return bool(conn.vendor == "postgresql")


def is_mysql(conn: BaseDatabaseWrapper) -> bool:
    """MySQL or MariaDB: Django names both ``mysql``."""
    return bool(conn.vendor == "mysql")


# -- the database's clock ---------------------------------------------------------


def now_sql(conn: BaseDatabaseWrapper) -> str:
    """The database's time at this statement."""
    if is_postgres(conn):
        return "statement_timestamp()"
    if is_mysql(conn):
        # UTC whatever the session's time_zone: Django stores UTC there (USE_TZ).
        return "UTC_TIMESTAMP(6)"
    # The text form Django stores on SQLite (UTC): comparable as strings.
    return "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now')"


def later_sql(conn: BaseDatabaseWrapper) -> str:
    """The database's time plus one ``%s`` parameter made by :func:`later_param`."""
    if is_postgres(conn):
        return "(statement_timestamp() + %s::float8 * interval '1 second')"
    if is_mysql(conn):
        return "(UTC_TIMESTAMP(6) + INTERVAL %s MICROSECOND)"
    return "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', %s)"


def later_param(conn: BaseDatabaseWrapper, delta: timedelta) -> Any:
    seconds = delta.total_seconds()
    if is_mysql(conn):
        return delta // timedelta(microseconds=1)
    return seconds if is_postgres(conn) else f"+{seconds:.6f} seconds"


def seconds_until_sql(conn: BaseDatabaseWrapper, column: str) -> str:
    if is_postgres(conn):
        return f"EXTRACT(EPOCH FROM ({q(conn, column)} - statement_timestamp()))::float8"
    if is_mysql(conn):
        return f"(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), {q(conn, column)}) / 1e6)"
    return f"((julianday({q(conn, column)}) - julianday('now')) * 86400.0)"


# -- the one rule for "is this entry dead?" ---------------------------------------
# Used by the claim's verdict, the takeover and the purge alike; ``now`` is an
# SQL expression (the database's clock) or a placeholder for an explicit time.


def expired_sql(conn: BaseDatabaseWrapper, now: str) -> str:
    return f"{q(conn, 'expires_at')} <= {now}"


def lease_over_sql(conn: BaseDatabaseWrapper, now: str) -> str:
    # The status as a literal, so that the planner can match the partial
    # idempotency_zombie_idx (WHERE status = 'in_progress') whatever the binding.
    return f"{q(conn, 'status')} = '{IN_PROGRESS}' AND {q(conn, 'locked_until')} <= {now}"


def dead_sql(conn: BaseDatabaseWrapper, now: str) -> str:
    return f"({expired_sql(conn, now)} OR ({lease_over_sql(conn, now)}))"


# -- reading an entry -------------------------------------------------------------

_ROW = ("fingerprint", "status", "response_status", "response_reason", "response_headers")


def row_sql(conn: BaseDatabaseWrapper) -> str:
    """The columns :func:`existing` reads, the verdicts computed by the database."""
    cols = ", ".join(q(conn, c) for c in (*_ROW, "response_body"))
    now = now_sql(conn)
    return f"{cols}, {dead_sql(conn, now)}, {seconds_until_sql(conn, 'expires_at')}"


ROW_WIDTH = len(_ROW) + 3


def existing(row: tuple[Any, ...]) -> Existing:
    fingerprint, status, code, reason, headers, body, dead, remaining = row
    response = None
    if status != IN_PROGRESS:
        response = seal.from_row(code, reason or "", headers, body)
    return Existing(str(fingerprint), response, bool(dead), float(remaining))


def where_key(conn: BaseDatabaseWrapper) -> str:
    return f"{q(conn, 'tenant')} = %s AND {q(conn, 'key')} = %s"


def where_owner(conn: BaseDatabaseWrapper) -> str:
    return f"{where_key(conn)} AND {q(conn, 'owner')} = %s"


def owner_param(conn: BaseDatabaseWrapper, owner: uuid.UUID) -> Any:
    return owner if conn.features.has_native_uuid_field else owner.hex


def read(target: Target) -> Existing | None:
    conn = connections[target.using]
    sql = cached_sql(
        conn,
        "read",
        lambda: f"SELECT {row_sql(conn)} FROM {table(conn)} WHERE {where_key(conn)}",
    )
    with conn.cursor() as cursor:
        cursor.execute(sql, [target.tenant, target.key])
        row = cursor.fetchone()
    return None if row is None else existing(tuple(row))


# -- writing an entry -------------------------------------------------------------


def insert_sql(conn: BaseDatabaseWrapper, select: str = "", returning: str = "") -> str:
    """INSERT of a new in-progress entry; ``select`` turns VALUES into a guarded SELECT."""
    pg = is_postgres(conn)
    cols = (
        *("tenant", "key", "fingerprint", "status", "owner", "response_headers"),
        *("response_reason", "locked_until", "created_at", "expires_at"),
    )
    owner, headers = ("%s::uuid", "'[]'::jsonb") if pg else ("%s", "'[]'")
    values = f"%s, %s, %s, '{IN_PROGRESS}', {owner}, {headers}, '', "
    values += f"{later_sql(conn)}, {now_sql(conn)}, {later_sql(conn)}"
    source = f"SELECT {values} {select}" if select else f"VALUES ({values})"
    if is_mysql(conn):
        # No ON CONFLICT: store.mysql catches the duplicate-key error (1062)
        # instead of INSERT IGNORE, which would also downgrade other errors.
        return f"INSERT INTO {table(conn)} ({', '.join(q(conn, c) for c in cols)}) {source}"
    return (
        f"INSERT INTO {table(conn)} ({', '.join(q(conn, c) for c in cols)}) {source} "
        f"ON CONFLICT ({q(conn, 'tenant')}, {q(conn, 'key')}) DO NOTHING{returning}"
    )


def insert_params(conn: BaseDatabaseWrapper, target: Target, owner: uuid.UUID) -> list[Any]:
    return [
        target.tenant,
        target.key,
        target.fingerprint,
        owner_param(conn, owner),
        later_param(conn, target.lease),
        later_param(conn, target.ttl),
    ]


def take_over(target: Target) -> Claim | None:
    """Claim a dead entry afresh; ``None`` if it is alive, held by a live transaction, or gone.

    ``SKIP LOCKED`` is what makes this safe against a request that outlived its
    lease: its transaction still holds the row lock, so the row is skipped.
    """
    conn = connections[target.using]
    sql = cached_sql(conn, "take_over", lambda: _take_over_sql(conn))
    owner = uuid.uuid4()
    params = [target.fingerprint, owner_param(conn, owner)]
    params += [later_param(conn, target.lease), later_param(conn, target.ttl)]
    with conn.cursor() as cursor:
        cursor.execute(sql, [*params, target.tenant, target.key])
        taken = cursor.rowcount == 1
    return Claim(target.using, target.tenant, target.key, owner) if taken else None


def _take_over_sql(conn: BaseDatabaseWrapper) -> str:
    target = f"{where_key(conn)} AND {dead_sql(conn, now_sql(conn))}"
    if conn.features.has_select_for_update_skip_locked:
        target = (
            f"{q(conn, 'id')} = (SELECT {q(conn, 'id')} FROM {table(conn)} WHERE {target} "
            f"FOR UPDATE SKIP LOCKED)"
        )
    headers = "'[]'::jsonb" if is_postgres(conn) else "'[]'"
    owner = "%s::uuid" if is_postgres(conn) else "%s"
    return (
        f"UPDATE {table(conn)} SET {q(conn, 'fingerprint')} = %s, "
        f"{q(conn, 'status')} = '{IN_PROGRESS}', {q(conn, 'owner')} = {owner}, "
        f"{q(conn, 'response_status')} = NULL, {q(conn, 'response_reason')} = '', "
        f"{q(conn, 'response_headers')} = {headers}, {q(conn, 'response_body')} = NULL, "
        f"{q(conn, 'locked_until')} = {later_sql(conn)}, {q(conn, 'created_at')} = "
        f"{now_sql(conn)}, {q(conn, 'expires_at')} = {later_sql(conn)} WHERE {target}"
    )


def record(
    claim: Claim, status: str, response: StoredResponse, ttl: timedelta, last: bool = False
) -> bool:
    """Store the final answer, fenced on the owner token; it expires ``ttl`` from now.

    ``last``: nothing follows in the transaction; the statement may carry its COMMIT.
    """
    conn = connections[claim.using]
    commit = last and carry.carry_commit(conn)
    if commit:
        # An UPDATE that finds no row (the claim lost) succeeds: this form fails
        # instead (division by zero), so that the COMMIT after it never runs.
        sql = cached_sql(conn, "record-commit", lambda: _record_sql(conn, guarded=True))
    else:
        sql = cached_sql(conn, "record", lambda: _record_sql(conn))
    headers, body = seal.row_columns(claim.using, claim.tenant, claim.key, response)
    params = [
        status,
        response.status,
        response.reason,
        headers,
        body,
        later_param(conn, ttl),
        claim.tenant,
        claim.key,
        owner_param(conn, claim.owner),
    ]
    with conn.cursor() as cursor:
        try:
            carry.last(cursor, sql, params, commit)
        except DataError as exc:
            if not commit or getattr(exc.__cause__, "sqlstate", None) != DIVISION_BY_ZERO:
                raise
            return False
        return commit or cursor.rowcount == 1


DIVISION_BY_ZERO = "22012"


def _record_sql(conn: BaseDatabaseWrapper, guarded: bool = False) -> str:
    update = (
        f"UPDATE {table(conn)} SET {q(conn, 'status')} = %s, {q(conn, 'response_status')} = %s, "
        f"{q(conn, 'response_reason')} = %s, {q(conn, 'response_headers')} = %s, "
        f"{q(conn, 'response_body')} = %s, {q(conn, 'locked_until')} = {now_sql(conn)}, "
        f"{q(conn, 'expires_at')} = {later_sql(conn)} WHERE {where_owner(conn)}"
    )
    if not guarded:
        return update
    return f"WITH updated AS ({update} RETURNING 1) SELECT 1 / count(*) FROM updated"


def release(claim: Claim) -> None:
    """Delete the claim so that the key is free again; a recorded answer is kept.

    After an error at COMMIT the answer may have committed all the same (the
    acknowledgement was lost): only a row still in progress is ours to free.
    """
    conn = connections[claim.using]
    with conn.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {table(conn)} WHERE {where_owner(conn)} "
            f"AND {q(conn, 'status')} = '{IN_PROGRESS}'",
            [claim.tenant, claim.key, owner_param(conn, claim.owner)],
        )


_SQL: dict[tuple[str, str], str] = {}


def cached_sql(conn: BaseDatabaseWrapper, name: str, build: Callable[[], str]) -> str:
    """``build()`` once per backend: the text only depends on its quoting rules."""
    cache_key = (conn.vendor, name)
    sql = _SQL.get(cache_key)
    if sql is None:
        sql = _SQL[cache_key] = build()
    return sql
