"""Prepared statements for the library's own hot statements on PostgreSQL.

Django binds parameters client-side and never prepares (``server_side_binding``
off, for connection poolers), so PostgreSQL parses and plans every statement
afresh: most of what a claim costs the server. The statements of the hot path
(the read-only claim's lock and lookup, the answer's ``INSERT``) go instead
through a psycopg cursor that binds server-side and prepares them on the first
run, on the same connection and in the same transaction as everything else.

The cursor is wrapped by Django's own cursor wrapper, so each statement still
shows up in ``connection.queries``, ``CaptureQueriesContext`` and
``connection.execute_wrapper()`` hooks.

``IDEMPOTENCY_PREPARED_STATEMENTS``: ``None`` (default) is on, except for a
database whose settings declare a transaction-pooling PgBouncer the way Django
documents it (``DISABLE_SERVER_SIDE_CURSORS = True``); ``True`` or ``False``
decide for every database. PgBouncer in transaction mode supports prepared
statements from 1.21 with ``max_prepared_statements`` set above 0.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorDebugWrapper, CursorWrapper

from idempotency_django._conf import conf
from idempotency_django._storage.store.sql import is_postgres


@functools.cache
def _prepared_cursor() -> type[Any]:
    """The cursor class, built on first use: importing the app must not need psycopg."""
    import psycopg

    class Prepared(psycopg.Cursor[Any]):
        """Binds server-side and prepares every statement it runs (kept per connection)."""

        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            # A statement without parameters (a carried BEGIN or COMMIT) runs unprepared.
            kwargs["prepare"] = params is not None
            return super().execute(query, params, **kwargs)

    return Prepared


def enabled(conn: BaseDatabaseWrapper) -> bool:
    if not is_postgres(conn):
        return False
    wanted = conf.PREPARED_STATEMENTS
    if wanted is None:
        return not conn.settings_dict.get("DISABLE_SERVER_SIDE_CURSORS", False)
    return wanted


class _Debug(CursorDebugWrapper):
    """Logs each statement with its parameters inlined, as Django's own cursors do.

    (Django's ``last_executed_query`` expects a client-side binding cursor here.)
    """

    @contextmanager
    def debug_sql(
        self,
        sql: Any = None,
        params: Any = None,
        use_last_executed_query: bool = False,
        many: bool = False,
    ) -> Iterator[None]:
        text = sql if many or params is None else self.db.ops.compose_sql(sql, params)
        with super().debug_sql(text, None, False, many):
            yield


def _wrap(conn: BaseDatabaseWrapper, raw: Any) -> CursorWrapper:
    # What conn.cursor() does with the cursor it creates: the debug wrapper
    # (query capture) when queries are logged, execute_wrapper() hooks always.
    conn.validate_thread_sharing()
    return _Debug(raw, conn) if conn.queries_logged else CursorWrapper(raw, conn)


def server_side_binding(conn: BaseDatabaseWrapper) -> bool:
    """Whether Django's own cursors on ``conn`` bind server-side (one statement per query)."""
    return bool(conn.settings_dict.get("OPTIONS", {}).get("server_side_binding"))


@contextmanager
def cursor(conn: BaseDatabaseWrapper) -> Iterator[CursorWrapper]:
    """A cursor of ``conn`` whose statements are prepared, as visible as Django's own."""
    conn.ensure_connection()
    raw = conn.connection
    if raw.prepare_threshold is None:
        # Django's default (None) turns psycopg's preparing off altogether, even
        # for prepare=True. A threshold never reached prepares only what asks to
        # be: Django's own cursors bind client-side and are never prepared anyway.
        raw.prepare_threshold = sys.maxsize
    wrapped = _wrap(conn, _prepared_cursor()(raw))
    with wrapped:
        yield wrapped


__all__ = ["cursor", "enabled", "server_side_binding"]
