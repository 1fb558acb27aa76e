"""The transaction's ``BEGIN`` and ``COMMIT`` travel with the library's own statements.

psycopg sends the ``BEGIN`` of a transaction Django opened, and its
``COMMIT``, as round trips of their own. On PostgreSQL, where the
transaction is the library's (its own outermost ``atomic()``), the claim
carries the ``BEGIN`` and the record carries the ``COMMIT``: a first
execution costs the view's statements plus two round trips, a replay two.

Every statement goes through Django's cursor, so query capture and
``connection.execute_wrapper()`` hooks (the write guard, users' tracing) see
them. ``tests/test_round_trips.py`` counts the messages at the wire.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper


def first(cursor: CursorWrapper, sql: str, params: Sequence[Any]) -> None:
    """Execute the transaction's first statement, carrying its ``BEGIN`` (one round trip).

    psycopg sends the ``BEGIN`` of a transaction Django opened as a round trip of
    its own. Where the first statement is ours, it carries the ``BEGIN`` instead:
    as one simple query (``BEGIN …; statement``) where Django binds client-side,
    or in one pipeline (``BEGIN`` and the statement, then one Sync) where the
    statement is bound server-side or prepared. Either way both go through
    Django's cursor: query capture and ``execute_wrapper()`` hooks see them.
    """
    conn = cursor.db
    simple = conn.vendor != "postgresql" or _simple(cursor)
    begin = carry_begin(conn, pipeline=not simple)
    if not begin:
        cursor.execute(sql, params)
        return
    raw = conn.connection
    try:
        if simple:
            cursor.execute(f"{begin}; {sql}", params)
            cursor.nextset()  # past the BEGIN's empty result, to the statement's
        else:
            with _pipelined(conn):
                cursor.execute(begin)
                cursor.execute(sql, params)
    finally:
        # psycopg back to what it is inside Django's transaction (autocommit off), by its
        # private attribute since the setter refuses in a transaction: for the rest of it,
        # Django would otherwise declare its server-side cursors WITH HOLD (withhold=
        # connection.autocommit), which FOR UPDATE refuses and which outlive the COMMIT.
        raw._autocommit = False
    setattr(conn, _CARRIED, conn.atomic_blocks[0])


def last(cursor: CursorWrapper, sql: str, params: Sequence[Any], commit: bool) -> None:
    """Execute the transaction's last statement, with its ``COMMIT`` if ``commit``.

    ``commit`` is :func:`carry_commit`'s answer, asked before ``sql`` was chosen:
    the statement must fail (not merely do nothing) where the transaction must
    not commit, since the server skips what follows a failed statement (the
    ``COMMIT``), in a simple query and in a pipeline alike.
    """
    if not commit:
        cursor.execute(sql, params)
    elif _simple(cursor):
        cursor.execute(f"{sql}; COMMIT", params)
    else:
        with _pipelined(cursor.db):
            cursor.execute(sql, params)
            cursor.execute("COMMIT")


def _simple(cursor: CursorWrapper) -> bool:
    """Whether ``cursor`` binds client-side: its queries may hold several statements."""
    from psycopg import ClientCursor  # only here: importing the app needs no psycopg

    return isinstance(cursor.cursor, ClientCursor)


@contextmanager
def _pipelined(conn: BaseDatabaseWrapper) -> Iterator[None]:
    """What is executed inside goes out together, ending with one Sync: one round trip.

    The results are read at the block's exit (where a statement's error is raised,
    as Django's error, wrapped); the cursors hold them afterwards.
    """
    with conn.wrap_database_errors, conn.connection.pipeline():
        yield


def carry_begin(conn: BaseDatabaseWrapper, pipeline: bool = False) -> str:
    """The ``BEGIN …`` to send with the transaction's first statement, or ``""``.

    psycopg is told the session is in autocommit so that it sends nothing before
    that statement, while Django's bookkeeping (``atomic()``, savepoints,
    ``on_commit``) is untouched; once the server is in the transaction, psycopg's
    ``COMMIT`` and ``ROLLBACK`` go out as usual (they look at the server's status,
    not at the autocommit flag), and ``atomic()``'s exit turns autocommit back on.
    ``pipeline``: the statement goes in a pipeline (libpq 14 and later).
    """
    if conn.vendor != "postgresql":
        return ""
    raw = conn.connection
    # Only the library's own outermost atomic() that turned autocommit off itself
    # (commit_on_exit): its exit commits and turns autocommit back on. A
    # transaction begun by hand (set_autocommit(False)) is left to its owner.
    if raw is None or raw.autocommit or len(conn.atomic_blocks) != 1 or not conn.commit_on_exit:
        return ""
    from psycopg import Pipeline
    from psycopg.pq import TransactionStatus

    if raw.pgconn.transaction_status != TransactionStatus.IDLE:
        return ""
    if raw.read_only is not None or raw.deferrable is not None:
        return ""  # a BEGIN of the connection's own making: psycopg's, as before
    if pipeline and not Pipeline.is_supported():
        return ""
    begin = "BEGIN"
    if raw.isolation_level is not None:
        begin += f" ISOLATION LEVEL {raw.isolation_level.name.replace('_', ' ')}"
    raw.autocommit = True  # client side only: no round trip
    return begin


def carry_commit(conn: BaseDatabaseWrapper) -> bool:
    """Whether the transaction's last statement may carry its ``COMMIT`` (:func:`last`).

    Only where its ``BEGIN`` was carried, in the outermost ``atomic()`` block of
    ours with no savepoint left open: ``atomic()``'s own exit then finds the
    transaction over (psycopg's ``commit()`` sends nothing on an idle session)
    and runs the ``on_commit`` hooks as usual. A failure at COMMIT fails the
    statement, which the caller answers as it answers any failure of its record.
    """
    if conn.vendor != "postgresql" or conn.get_autocommit() or conn.savepoint_ids:
        return False
    if len(conn.atomic_blocks) != 1 or getattr(conn, _CARRIED, None) is not conn.atomic_blocks[0]:
        return False  # the BEGIN was not carried in this block: it is not ours to end
    return not conn.needs_rollback and conn.commit_on_exit


# On Django's connection: the atomic() block whose BEGIN :func:`first` carried.
_CARRIED = "_idempotency_carried_begin"


__all__ = ["carry_begin", "carry_commit", "first", "last"]
