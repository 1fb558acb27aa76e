"""The write guard below Django: a protected view writing through a driver's own cursor.

``databases.watching`` sees every statement sent through Django's cursors on the
other aliases (``connection.execute_wrapper()``). A statement sent through the
driver's own cursor (``connections["other"].connection.cursor()``, or psycopg's
``connection.execute()``) never passes there. While a protected view runs, the
other aliases' driver connections in this thread check what their cursors send:
on PostgreSQL and MySQL they make their cursors from a subclass of their own
cursor class that hands each statement to the same check first (psycopg's
``cursor_factory``, mysqlclient's ``cursorclass``); on SQLite an authorizer
(``set_authorizer()``) hands each write action to it as SQLite prepares the
statement, whatever cursor sent it.

A statement Django sends is checked once, by Django's hook: its cursor is one of
these too, and it is marked as Django's while it runs (:func:`through_django`).
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.signals import connection_created

logger = logging.getLogger("idempotency_django")

Check = Callable[[object], None]  # raises UncoveredWrite, or reports; given the SQL

# The active checks by alias (this context's protected view), and whether the statement
# running now came through Django's cursor (already checked by its hook).
_checks: ContextVar[dict[str, Check] | None] = ContextVar("idempotency_driver_checks", default=None)
_django: ContextVar[bool] = ContextVar("idempotency_through_django", default=False)
# The connections this context's guarding() block guarded itself, and its thread.
_mine: ContextVar[_Mine] = ContextVar("idempotency_driver_guarded")
_ATTRIBUTE = {"postgresql": "cursor_factory", "mysql": "cursorclass"}
_BASE = "_idempotency_unguarded"  # on a guarded class: the driver's own, put back after
# On a Django SQLite connection: the sqlite3 connection whose authorizer this module set
# (sqlite3's connection takes no attribute).
_AUTHORIZED = "_idempotency_authorized"


@contextmanager
def through_django() -> Iterator[None]:
    """Around a statement Django's cursor sends: the driver's cursor leaves it alone."""
    token = _django.set(True)
    try:
        yield
    finally:
        _django.reset(token)


@contextmanager
def guarding(conns: dict[str, BaseDatabaseWrapper], checks: dict[str, Check]) -> Iterator[None]:
    """While the block runs, writes through these aliases' driver cursors go to ``checks``."""
    mine = _Mine(conn for alias in checks if _guard(conn := conns[alias]))
    token, mine_token = _checks.set(checks), _mine.set(mine)  # _opened adds to ``mine``
    try:
        yield
    finally:
        _checks.reset(token)
        _mine.reset(mine_token)
        for conn in mine:  # only what this block guarded: an outer view's stay guarded
            try:
                _unguard(conn)
            except Exception:  # noqa: BLE001  (closed by hand meanwhile: nothing to put back)
                logger.debug("could not put %r's driver cursors back", conn.alias)


def expire() -> None:
    """Make the SQLite connections guarded here forget their cached statements.

    SQLite asks the authorizer only while preparing a statement, and sqlite3 keeps
    the statements it prepared: one allowed meanwhile (``databases.uncovered()``)
    would run again unasked. Setting the authorizer again expires them all.
    """
    for conn in _mine.get(None) or ():
        raw = conn.connection
        if conn.vendor == "sqlite" and raw is not None and _authorized(conn, raw):
            raw.set_authorizer(_authorizer(conn.alias))


def _guard(conn: BaseDatabaseWrapper) -> bool:
    """Make the driver connection check what its own cursors send; whether this call did
    (not where the driver can't, or an outer view already has)."""
    raw = conn.connection
    if raw is None:
        return False
    if conn.vendor == "sqlite":
        if _authorized(conn, raw):
            return False
        raw.set_authorizer(_authorizer(conn.alias))
        setattr(conn, _AUTHORIZED, raw)
        return True
    attribute = _ATTRIBUTE.get(conn.vendor)
    if attribute is None:
        return False
    current = getattr(raw, attribute, None)
    if not isinstance(current, type) or hasattr(current, _BASE):
        return False
    setattr(raw, attribute, _guarded(current, conn.alias))
    return True


def _authorized(conn: BaseDatabaseWrapper, raw: Any) -> bool:
    return getattr(conn, _AUTHORIZED, None) is raw


def _unguard(conn: BaseDatabaseWrapper) -> None:
    raw = conn.connection
    if raw is None:
        return
    if conn.vendor == "sqlite":
        if _authorized(conn, raw):
            raw.set_authorizer(None)
            delattr(conn, _AUTHORIZED)
        return
    attribute = _ATTRIBUTE[conn.vendor]  # only a connection _guard() guarded comes here
    base = getattr(getattr(raw, attribute, None), _BASE, None)
    if base is not None:
        setattr(raw, attribute, base)


class _Mine(list[BaseDatabaseWrapper]):
    """The connections one ``guarding()`` block guarded, in the thread that runs it."""

    def __init__(self, conns: Iterable[BaseDatabaseWrapper]) -> None:
        super().__init__(conns)
        self.thread = threading.get_ident()


def _opened(sender: object, connection: BaseDatabaseWrapper, **kwargs: object) -> None:
    """A connection the protected view opens meanwhile is guarded from its first statement.

    Only in the view's own thread: a worker thread that carries the view's context
    has connections of its own, which the view can't put back when it ends.
    """
    checks, mine = _checks.get(), _mine.get(None)
    if checks is None or mine is None or connection.alias not in checks:
        return
    if mine.thread != threading.get_ident():
        return
    if _guard(connection):
        mine.append(connection)


connection_created.connect(_opened, dispatch_uid="idempotency_django.driver_cursors")


@functools.cache
def _guarded(base: type, alias: str) -> type:
    """``base`` whose ``execute``/``executemany`` hand the SQL to ``alias``'s active check."""

    def check(cursor: Any, sql: object) -> None:
        checks = _checks.get()
        found = None if checks is None or _django.get() else checks.get(alias)
        if found is not None:
            # psycopg.sql's Composed and SQL objects: checked as the text they send.
            found(sql.as_string(cursor) if hasattr(sql, "as_string") else sql)

    class Guarded(base):  # type: ignore[misc]
        def execute(self, query: Any, *args: Any, **kwargs: Any) -> Any:
            check(self, query)
            return super().execute(query, *args, **kwargs)

        def executemany(self, query: Any, *args: Any, **kwargs: Any) -> Any:
            check(self, query)
            return super().executemany(query, *args, **kwargs)

    Guarded.__name__ = Guarded.__qualname__ = base.__name__
    Guarded.__module__ = base.__module__
    setattr(Guarded, _BASE, base)
    return Guarded


def _authorizer(alias: str) -> Callable[..., int]:
    """sqlite3's authorizer for ``alias``: a write action goes to its active check.

    SQLite asks it while preparing each statement, whatever cursor sends it, and
    setting it expires the connection's cached statements (see :func:`expire`). A
    refused write is denied (sqlite3 raises "not authorized"; ``watching`` turns
    that into the ``UncoveredWrite`` the check recorded); nothing may raise here.
    """
    import sqlite3

    def authorize(action: int, first: str | None, *rest: object) -> int:
        verb = _sqlite_writes().get(action)
        checks = _checks.get()
        found = None if verb is None or checks is None or _django.get() else checks.get(alias)
        if found is None:
            return sqlite3.SQLITE_OK
        try:
            found(f"{verb} {first or ''}")
        except Exception:  # noqa: BLE001  (the refusal; sqlite3 would swallow it anyway)
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK

    return authorize


@functools.cache
def _sqlite_writes() -> dict[int, str]:
    """sqlite3's write actions, by code, as the first keyword of a statement doing them."""
    import sqlite3

    writes = {}
    for name in dir(sqlite3):
        action = name.removeprefix("SQLITE_")
        if action in ("INSERT", "UPDATE", "DELETE") or action.startswith(
            ("CREATE_", "DROP_", "ALTER_")
        ):
            writes[getattr(sqlite3, name)] = action.split("_")[0]
    return writes


__all__ = ["expire", "guarding", "through_django"]
