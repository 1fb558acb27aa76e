"""Whose failure a database error is: the store's (away: retry later, never counted) or
the handler's own (a cancelled statement, a deadlock, a lock timeout: counted, then a
dead letter). Shared by :func:`~.core.consume` and the tasks' ``max_attempts``.

Only the claim's, the record's and the commit's errors, and a lost connection, mean
the store is away. What the handler raises is marked as its own (:func:`handler_errors`);
a marked database error is still the store's when it is connection-level or the
connection no longer answers. No model is imported here: the task adapters use it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Final

from django.db import InterfaceError, OperationalError, connections

from idempotency_django._storage.store import mysql, pg
from idempotency_django.exceptions import StoreUnavailable

_MARK: Final = "_idempotency_handler_error"
# connection_exception (class 08), admin_shutdown, crash_shutdown, cannot_connect_now.
_PG_AWAY: Final = frozenset({"57P01", "57P02", "57P03"})
# CR_CONNECTION_ERROR, CR_CONN_HOST_ERROR, CR_SERVER_GONE_ERROR, CR_SERVER_LOST,
# CR_SERVER_LOST_EXTENDED; ER_CON_COUNT_ERROR.
_MYSQL_AWAY: Final = frozenset({2002, 2003, 2006, 2013, 2055, 1040})


@contextmanager
def handler_errors() -> Iterator[None]:
    """Around a handler (a task's body): what it raises is its own failure."""
    try:
        yield
    except BaseException as error:
        with suppress(AttributeError, TypeError):  # an exception without a __dict__
            setattr(error, _MARK, True)
        raise


def raised_by_handler(error: BaseException) -> bool:
    return bool(getattr(error, _MARK, False))


def store_away(error: BaseException, using: str) -> bool:
    """Whether ``error`` means the store is unreachable (a retry, never a failure)."""
    if isinstance(error, StoreUnavailable):
        return True
    if not isinstance(error, OperationalError | InterfaceError):
        return False
    if not raised_by_handler(error) or isinstance(error, InterfaceError):
        return True  # the claim's, the record's, the commit's; or a closed connection
    state, errno = pg.sqlstate(error), mysql.errno(error)
    if (state is not None and (state.startswith("08") or state in _PG_AWAY)) or (
        errno in _MYSQL_AWAY
    ):
        return True
    if state is not None or errno is not None:
        return False  # the server answered: a statement of the handler's failed
    return not _answers(using)  # no code to go by (psycopg's lost connection, SQLite)


def _answers(using: str) -> bool:
    conn = connections[using]
    try:
        return conn.connection is not None and conn.is_usable()
    except Exception:  # noqa: BLE001 - any failure to answer is the answer
        return False
