"""The read-only claim: the lock protocol's claim when nothing has to be written up front.

Where it runs: ``"lock"``, on PostgreSQL, in a transaction the library opens
itself, at READ COMMITTED (Django's default). There a claim needs no row: the
key's advisory lock keeps every other claim of ours out until this
transaction ends, and the finished entry is written once, by one ``INSERT``,
when the answer is known. A replay, a 409 and a 422 write nothing.

The order is the whole point. The entry is looked up by a statement *after*
the one that took the lock: at READ COMMITTED every statement takes a fresh
snapshot, so the lookup sees whatever the previous holder committed before
releasing the lock. One statement that locks and reads would read on a
snapshot taken before the lock was granted, and a duplicate arriving just as
the holder commits would run the view again. The statements travel in one
query (one round trip); ``tests/test_snapshot_race.py`` tells the two forms
apart.

Anything else (REPEATABLE READ or SERIALIZABLE, whose snapshot is the
transaction's; a caller's transaction; ``"lease"``) keeps the inserting claim
of :mod:`.pg`.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, OperationalError, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from idempotency_django._protocol.responses import StoredResponse
from idempotency_django._storage import seal
from idempotency_django._storage.store import carry, pg, prepared
from idempotency_django._storage.store.sql import (
    BUSY,
    Claim,
    Found,
    Target,
    cached_sql,
    existing,
    is_postgres,
    later_param,
    later_sql,
    now_sql,
    q,
    row_sql,
    table,
    where_key,
)
from idempotency_django.exceptions import RequestInProgress
from idempotency_django.models import IdempotencyEntry

# Tests turn it off to run every path under both claim forms.
ENABLED = True
# Below this much time left to wait, try the lock instead of queueing for it.
_MIN_WAIT = 0.001
# Where the blocking form keeps the session's lock_timeout while it borrows it.
_SAVED = "idempotency_django.lock_timeout"


@dataclass(frozen=True)
class Pending(Claim):
    """A claim that wrote nothing yet: :func:`record` inserts the finished entry."""

    fingerprint: str = ""


def usable(conn: BaseDatabaseWrapper, own: bool) -> bool:
    """Whether a claim on ``conn`` may be the read-only one (see the module docstring)."""
    if not (ENABLED and own and is_postgres(conn)):
        return False
    from psycopg import IsolationLevel  # only here: importing the app needs no psycopg

    conn.ensure_connection()
    raw = conn.connection
    # psycopg's own setting (what its BEGIN says), not Django's attribute: without
    # OPTIONS["isolation_level"] Django leaves it unset, and the server's default
    # (ALTER DATABASE, a role, a pooler's connect_query) decides.
    level = raw.isolation_level
    if level is None:
        committed = _server_default.get(conn.alias)
        if committed is None:
            row = raw.execute("SELECT current_setting('default_transaction_isolation')").fetchone()
            committed = _server_default[conn.alias] = row is not None and row[0] in _COMMITTED
    else:
        committed = level in (IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED)
    server_side = conn.alias not in _functions and (
        prepared.enabled(conn) or prepared.server_side_binding(conn)
    )
    if committed and server_side:
        # Asked here, in autocommit, the first time: inside the claim's transaction
        # the probe would go first, and the claim could no longer carry the BEGIN.
        _has_function(conn)
    return committed


_COMMITTED = ("read committed", "read uncommitted")


@contextmanager
def read_committed(conn: BaseDatabaseWrapper) -> Iterator[None]:
    """Transactions opened here begin ``ISOLATION LEVEL READ COMMITTED``, whatever the session says.

    :func:`usable` judged the alias's level (psycopg's, else the server's default);
    an earlier request may have changed the session's since (``SET SESSION
    CHARACTERISTICS ... REPEATABLE READ`` on a persistent connection), and the
    claim's lookup would then read on a snapshot older than its lock. psycopg
    puts the level in the ``BEGIN`` it sends anyway: no round trip added.
    """
    raw = conn.connection
    if raw.isolation_level is not None or not conn.get_autocommit():
        # psycopg's BEGIN already names it (READ COMMITTED: usable() said so), or a
        # transaction begun by hand (set_autocommit(False)) is its owner's.
        yield
        return
    from psycopg import IsolationLevel

    raw.isolation_level = IsolationLevel.READ_COMMITTED
    try:
        yield
    finally:
        # Left as found for the connection's next transaction (the user's own), once
        # ours has ended; a connection closed meanwhile is never used again.
        if conn.connection is raw and not raw.closed and not conn.in_atomic_block:
            raw.isolation_level = None


# The server's default level (the database's or role's setting), asked once per
# alias in this process: not a round trip per new connection (CONN_MAX_AGE = 0).
_server_default: dict[str, bool] = {}


def claim(target: Target, bounded: bool, wait: float) -> Found:
    """Take the key's advisory lock, then read its entry; write nothing.

    With ``wait`` left, queue for the lock at most that long (a ``lock_timeout``
    error, 55P03, means the holder is still at it); otherwise only try it.
    """
    conn = connections[target.using]
    blocking = wait >= _MIN_WAIT
    lock_params: list[Any] = [target.lock_id, *pg.idle_params(target)[: int(bounded)]]
    prepare = prepared.enabled(conn)
    server_side = prepare or prepared.server_side_binding(conn)
    if server_side and not _has_function(conn):
        # Migration 0004 not applied yet (a deploy running code before migrate):
        # the two statements, one round trip each, bound as the connection binds.
        with conn.cursor() as cursor:
            cursor.execute(lock_sql(bounded), lock_params)
            got = bool(cursor.fetchone()[0])
            cursor.execute(lookup_sql(conn), [target.tenant, target.key])
            row = cursor.fetchone()
    elif server_side:
        # A query bound server-side holds one statement: the function (migration
        # 0004) runs both, lock then lookup, in one call (prepared, or not).
        sql = cached_sql(conn, "ro-function", function_sql)
        idle = int(pg.idle_params(target)[0]) if bounded else None
        wait_ms = max(1, int(wait * 1000)) if blocking else 0
        with prepared.cursor(conn) if prepare else conn.cursor() as cursor:
            carry.first(cursor, sql, [target.lock_id, wait_ms, idle, target.tenant, target.key])
            got, *found = cursor.fetchone()
        row = None if found[0] is None else found
    else:
        name = f"ro-claim:{blocking}:{bounded}"
        sql = cached_sql(conn, name, lambda: claim_sql(conn, blocking, bounded))
        params: list[Any] = [f"{max(1, int(wait * 1000))}ms"] if blocking else []
        params += [*lock_params, target.tenant, target.key]
        with conn.cursor() as cursor:
            carry.first(cursor, sql, params)
            got = blocking or bool(cursor.fetchone()[0])
            while cursor.nextset():
                pass  # the last result is the lookup's
            row = cursor.fetchone()
    if row is None:
        if not got:
            return BUSY
        return Pending(target.using, target.tenant, target.key, uuid.uuid4(), target.fingerprint)
    seen = existing(tuple(row))
    if not got and (seen.response is None or seen.dead):
        return BUSY  # a final answer can be replayed (or refused) whoever holds the lock
    return seen


FUNCTION = "idempotency_django_claim"


def function_sql() -> str:
    """The claim as one call of the migration's function: lock, then lookup, inside it."""
    return f"SELECT * FROM {FUNCTION}({pg.LOCK_ID}, %s::integer, %s::integer, %s::text, %s::text)"


_functions: set[str] = set()  # aliases known to have it (this process)


def _has_function(conn: BaseDatabaseWrapper) -> bool:
    """Whether migration 0004's function exists; asked until it does, then never again.

    A catalog probe, sent on the raw connection: it says nothing about any key.
    """
    if conn.alias in _functions:
        return True
    conn.ensure_connection()
    row = conn.connection.execute(
        "SELECT to_regprocedure(%s) IS NOT NULL",
        [f"{FUNCTION}(bigint, integer, integer, text, text)"],
    ).fetchone()
    if row is not None and row[0]:
        _functions.add(conn.alias)
        return True
    return False


def lock_sql(bounded: bool) -> str:
    bound = f", {pg.IDLE_BOUND}" if bounded else ""
    return f"SELECT pg_try_advisory_xact_lock({pg.LOCK_ID}){bound}"


def lookup_sql(conn: BaseDatabaseWrapper) -> str:
    return f"SELECT {row_sql(conn)} FROM {table(conn)} WHERE {where_key(conn)}"


def claim_sql(conn: BaseDatabaseWrapper, blocking: bool, bounded: bool) -> str:
    """The claim's statements, in one query: lock first, then a lookup on a fresh snapshot."""
    bound = f", {pg.IDLE_BOUND}" if bounded else ""
    lookup = lookup_sql(conn)
    if not blocking:
        return f"{lock_sql(bounded)}; {lookup}"
    return (
        f"SELECT set_config('{_SAVED}', current_setting('lock_timeout'), true), "
        f"set_config('lock_timeout', %s, true); "
        f"SELECT pg_advisory_xact_lock({pg.LOCK_ID}){bound}; "
        f"SELECT set_config('lock_timeout', current_setting('{_SAVED}'), true); {lookup}"
    )


_COLUMNS = (
    *("tenant", "key", "fingerprint", "status", "owner", "response_status"),
    *("response_reason", "response_headers", "response_body"),
    *("locked_until", "created_at", "expires_at"),
)


def record(
    claim: Pending, status: str, response: StoredResponse, ttl: Any, last: bool = False
) -> None:
    """Insert the finished entry; a row already there (a writer that took no lock) is a 409.

    The caller is inside the claim's transaction: the 409 rolls back the view's writes too.
    ``last``: nothing follows in the transaction; the statement may carry its COMMIT.
    """
    conn = connections[claim.using]
    sql = cached_sql(conn, "ro-record", lambda: _record_sql(conn))
    headers, body = seal.row_columns(claim.using, claim.tenant, claim.key, response)
    use = prepared.cursor(conn) if prepared.enabled(conn) else conn.cursor()
    commit = last and carry.carry_commit(conn)
    if commit:
        # The COMMIT must not follow a conflict: without ON CONFLICT the INSERT
        # fails, and the server skips what follows it (the COMMIT).
        sql = cached_sql(conn, "ro-record-commit", lambda: _record_sql(conn, conflict=""))
    params = [
        claim.tenant,
        claim.key,
        claim.fingerprint,
        status,
        claim.owner,
        response.status,
        response.reason,
        headers,
        body,
        later_param(conn, ttl),
    ]
    try:
        with use as cursor:
            carry.last(cursor, sql, params, commit)
            # Without ON CONFLICT (a carried COMMIT) a row already there is an error.
            inserted = commit or cursor.rowcount == 1
    except OperationalError as exc:
        if pg.sqlstate(exc) not in pg.BUSY_STATES:
            raise
        inserted = False  # a stricter level than we saw: the key committed meanwhile
    except IntegrityError as exc:
        if not commit or pg.sqlstate(exc) != "23505" or _table_of(exc) != _ENTRIES:
            # Not our row: a deferred constraint of the view's tables, failing at COMMIT.
            raise
        inserted = False  # the carried COMMIT's form: the row is there
    if not inserted:
        raise RequestInProgress()


_ENTRIES = IdempotencyEntry._meta.db_table


def _table_of(exc: BaseException) -> str | None:
    """The table a PostgreSQL error names (its diagnostics), if any."""
    diag = getattr(exc.__cause__, "diag", None)
    return getattr(diag, "table_name", None)


def _record_sql(conn: BaseDatabaseWrapper, conflict: str | None = None) -> str:
    now = now_sql(conn)
    values = f"%s, %s, %s, %s, %s::uuid, %s, %s, %s::jsonb, %s, {now}, {now}, {later_sql(conn)}"
    if conflict is None:
        conflict = f" ON CONFLICT ({q(conn, 'tenant')}, {q(conn, 'key')}) DO NOTHING"
    return (
        f"INSERT INTO {table(conn)} ({', '.join(q(conn, c) for c in _COLUMNS)}) "
        f"VALUES ({values}){conflict}"
    )


__all__ = ["Pending", "claim", "claim_sql", "read_committed", "record", "usable"]
