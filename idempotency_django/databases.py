"""Which database holds a request's entries, every database that may hold some, and
the watch that catches a protected view writing to another one.

``IDEMPOTENCY_DATABASE`` (and ``database=``, ``idempotency_database``) is an alias,
a callable taking the request and returning an alias, or the dotted path of one:
a sharded project keeps each entry beside its tenant's business rows, so the
entry and the business writes commit in one transaction.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from contextvars import ContextVar
from functools import lru_cache
from typing import Any, TypeAlias

from django.conf import settings
from django.core import mail
from django.core.exceptions import ImproperlyConfigured
from django.db import connections, models, router
from django.db.backends.signals import connection_created
from django.http import HttpRequest
from django.utils.module_loading import import_string

from idempotency_django import signals
from idempotency_django._storage import driver_cursors

logger = logging.getLogger("idempotency_django")
Chooser: TypeAlias = Callable[[HttpRequest], str]

# The alias of the protected view running in this context (what the outbox and
# nested calls default to), and the aliases its view may write to uncovered.
_current: ContextVar[str | None] = ContextVar("idempotency_database", default=None)
_uncovered: ContextVar[frozenset[str]] = ContextVar("idempotency_uncovered", default=frozenset())


class UncoveredWrite(ImproperlyConfigured):
    """A protected view wrote to a database other than its entry's (refused, not run)."""


def setting() -> object:
    return getattr(settings, "IDEMPOTENCY_DATABASE", "default")


def chooser(option: object) -> str | Chooser:
    """``option`` as an alias, or as the callable choosing one (a dotted path imported)."""
    if callable(option):
        return option
    if isinstance(option, str) and option in settings.DATABASES:
        return option
    if isinstance(option, str) and "." in option:
        return _imported(option)
    raise ImproperlyConfigured(
        f"The idempotency database {option!r} is neither an alias in DATABASES "
        f"({', '.join(settings.DATABASES)}) nor a callable (or dotted path of one) taking "
        "the request and returning an alias."
    )


@lru_cache(maxsize=64)
def _imported(path: str) -> Chooser:
    try:
        found = import_string(path)
    except ImportError as exc:
        raise ImproperlyConfigured(
            f"The idempotency database {path!r} can't be imported: {exc}"
        ) from exc
    if not callable(found):
        raise ImproperlyConfigured(f"The idempotency database {path!r} is not callable.")
    return found  # type: ignore[no-any-return]


def entries_alias(option: object, request: HttpRequest | None) -> str:
    """The alias holding this request's entry: ``option`` (``None``: the setting) resolved."""
    chosen = chooser(setting() if option is None else option)
    if isinstance(chosen, str):
        return chosen
    if request is None:
        raise ImproperlyConfigured(_NEEDS_REQUEST)
    alias = chosen(request)
    if not isinstance(alias, str) or alias not in settings.DATABASES:
        raise ImproperlyConfigured(
            f"The idempotency database chooser {_name(chosen)} returned {alias!r}, "
            f"not an alias in DATABASES ({', '.join(settings.DATABASES)})."
        )
    return alias


def entries_aliases(option: object) -> list[str]:
    """The aliases ``option`` (``None``: the setting) may put entries in, known before the
    request: its alias, or, for a callable, every alias that may hold entries."""
    value = setting() if option is None else option
    if isinstance(value, str) and "." not in value:
        return [value]  # an alias; a wrong one is E008's, not a 500 here
    chosen = chooser(value)
    return [chosen] if isinstance(chosen, str) else possible_aliases()


def default_alias() -> str:
    """The entries' alias where no request decides it: the protected view's, or the setting."""
    current = _current.get()
    if current is not None:
        return current
    chosen = chooser(setting())
    if isinstance(chosen, str):
        return chosen
    raise ImproperlyConfigured(_NEEDS_REQUEST)


_NEEDS_REQUEST = (
    "IDEMPOTENCY_DATABASE chooses the alias from the request, and there is no request here "
    "(a task, a command, a call outside a protected view): name the database explicitly "
    "(database=..., using=..., --database ...)."
)


# What the database server itself knows a database by (docs/security.rst, "The entries
# database's identity"); every value read on the caller's connection, changing nothing.
_SERVER_IDENTITY = {
    # The database's OID (a TEMPLATE clone, a dump restored as another database: another
    # one) and the cluster's system identifier (initdb's: another cluster has another, a
    # physical replica the same). pg_control_system() is PUBLIC's to execute by default.
    "postgresql": (
        "SELECT d.oid::text, s.system_identifier::text FROM pg_catalog.pg_database d, "
        "pg_catalog.pg_control_system() s WHERE d.datname = pg_catalog.current_database()"
    ),
    # No OID there, and @@server_uuid / @@server_uid name the server (a replica has its
    # own, a failover would change it): the database's name.
    "mysql": "SELECT DATABASE()",
    # The main database's file as SQLite opened it ('' in memory).
    "sqlite": "SELECT file FROM pragma_database_list WHERE name = 'main'",
}


def server_identity(alias: str) -> bytes:
    """What the server of ``alias`` knows its database by (read anew on each call)."""
    connection = connections[alias]
    with connection.cursor() as cursor:
        cursor.execute(_SERVER_IDENTITY[connection.vendor])
        row = cursor.fetchone()
    return json.dumps([connection.vendor, *map(str, row)]).encode()


def possible_aliases(model: type[models.Model] | None = None) -> list[str]:
    """Every alias that may hold ``model``'s rows (default: the entries), without a query.

    The static setting's alias, then every alias Django's routers let the model
    be migrated to (``allow_migrate``: where ``migrate`` creates its table), less
    test mirrors (the same database under another name).
    """
    from idempotency_django.models import IdempotencyEntry

    model = model or IdempotencyEntry
    static = setting()
    found = [static] if isinstance(static, str) and static in settings.DATABASES else []
    for alias in connections:
        mirror = (settings.DATABASES[alias].get("TEST") or {}).get("MIRROR")
        if alias not in found and not mirror and router.allow_migrate_model(alias, model):
            found.append(alias)
    return found


def holding_aliases(model: type[models.Model] | None = None) -> list[str]:
    """:func:`possible_aliases` that do hold the table and accept writes (one query each).

    An alias without the table (``migrate`` never ran there) or a read-only one (a hot
    standby, ``transaction_read_only``) holds nothing a purge or a relay could change.
    """
    from idempotency_django.models import IdempotencyEntry

    model = model or IdempotencyEntry
    return [
        alias
        for alias in possible_aliases(model)
        if model._meta.db_table in connections[alias].introspection.table_names()
        and not _read_only(alias)
    ]


def chosen_or_every(database: str | None, model: type[models.Model] | None = None) -> list[str]:
    """``[database]`` when a command or task names one, else :func:`holding_aliases`
    (no query when only one alias may hold the rows: a single-database project)."""
    if database is not None:
        return [database]
    possible = possible_aliases(model)
    return possible if len(possible) == 1 else holding_aliases(model)


def _read_only(alias: str) -> bool:
    conn = connections[alias]
    if conn.vendor != "postgresql":
        return False
    with conn.cursor() as cursor:
        cursor.execute("SELECT current_setting('transaction_read_only')")
        return bool(cursor.fetchone()[0] == "on")


# The first keyword of a statement that changes data or schema; a WITH query is
# a write when one of its parts is.
_WRITE = re.compile(
    r"(?:INSERT|UPDATE|DELETE|MERGE|TRUNCATE|CREATE|ALTER|DROP|COPY|REPLACE)\b", re.I
)
_WITH_WRITE = re.compile(r"WITH\b.*\b(?:INSERT|UPDATE|DELETE|MERGE)\b", re.I | re.S)


def is_write(sql: object) -> bool:
    text = _statement(sql.decode(errors="replace") if isinstance(sql, bytes) else str(sql))
    return bool(_WRITE.match(text) or _WITH_WRITE.match(text))


_BLANK = " \t\r\n\f\v("


def _statement(text: str) -> str:
    """``text`` from its first keyword: past whitespace, opening parentheses and leading
    comments (a tracing tag such as sqlcommenter's may come first)."""
    while True:
        text = text.lstrip(_BLANK)
        if text.startswith("/*"):
            end = text.find("*/")
            text = text[end + 2 :] if end >= 0 else ""
        elif text.startswith(("--", "#")):  # "#": MySQL's line comment
            text = text.partition("\n")[2]
        else:
            return text


@contextmanager
def watching(alias: str) -> Iterator[None]:
    """Run a protected view with ``alias`` as its entries' database, watching the others.

    A write statement on another alias is outside the transaction that holds the
    claim: a retry would repeat it. So is a write on ``alias`` itself through
    another connection: one a worker thread uses (a thread that carries this
    context: ``sync_to_async(thread_sensitive=False)``, ``asyncio.to_thread``,
    ``contextvars.copy_context().run``). Under ``DEBUG`` or a test run it is
    refused before it runs (:class:`UncoveredWrite`, naming the alias and the
    fix); in production it runs, with a warning and the ``uncovered_write`` signal.
    """
    view = _Watching(alias, connections[alias], {o: _Watch(o, alias) for o in connections})
    others = {other: connections[other] for other in view.watches if other != alias}
    token, watching_token = _current.set(alias), _watching.set(view)
    try:
        with ExitStack() as stack:
            for conn in others.values():  # the claim's own connection is never watched
                if _hook not in conn.execute_wrappers:  # a worker thread's earlier hook
                    stack.enter_context(conn.execute_wrapper(_hook))
            # And below Django, the driver's own cursors of this thread (where it can).
            checks: dict[str, driver_cursors.Check] = {o: view.watches[o].check for o in others}
            stack.enter_context(driver_cursors.guarding(others, checks))
            try:
                yield
            except UncoveredWrite:
                raise
            except Exception as exc:
                # The driver's own error for a write the guard denied (sqlite3's "not
                # authorized"), or the view's after it: the refused write is the cause.
                _raise_refused(view, exc)
                raise
        _raise_refused(view)  # the view caught our error and went on: fail it anyway
    finally:
        _watching.reset(watching_token)
        _current.reset(token)


def _raise_refused(view: _Watching, cause: BaseException | None = None) -> None:
    refused = next((w for w in list(view.watches.values()) if w.refused), None)
    if refused is not None:
        raise UncoveredWrite(refused.message()) from cause


class _Watching:
    """The protected view running in this context: its entries' alias and connection, the
    thread it runs in, and a watch per alias (one added for an alias opened meanwhile)."""

    def __init__(self, alias: str, own: Any, watches: dict[str, _Watch]) -> None:
        self.alias, self.own, self.watches = alias, own, watches
        self.thread = threading.get_ident()


_watching: ContextVar[_Watching | None] = ContextVar("idempotency_watching", default=None)


def _hook(execute: Any, sql: object, params: Any, many: bool, context: Any) -> Any:
    """A statement sent while a protected view runs in this context goes to its watch,
    unless it is on the connection that holds the view's claim."""
    view = _watching.get()
    conn = context["connection"]
    if view is None or conn is view.own:
        return execute(sql, params, many, context)
    watch = view.watches.get(conn.alias)
    if watch is None:  # an alias that was not in DATABASES when the view began
        watch = view.watches.setdefault(conn.alias, _Watch(conn.alias, view.alias))
    return watch(execute, sql, params, many, context)


def _created(sender: object, connection: Any, **kwargs: object) -> None:
    """A worker thread's connection opened while a view is watched keeps the hook.

    First in the list: ``execute_wrapper()`` blocks pop the last one, their own.
    The view's own thread is watched by :func:`watching` itself (a connection it
    opens, such as the server secret's apart, is none of a worker's).
    """
    view = _watching.get()
    if view is None or view.thread == threading.get_ident():
        return
    if _hook not in connection.execute_wrappers:
        connection.execute_wrappers.insert(0, _hook)


connection_created.connect(_created, dispatch_uid="idempotency_django.databases.hook")


@contextmanager
def uncovered(*aliases: str) -> Iterator[None]:
    """Inside a protected view: writes to ``aliases`` are knowingly not covered by its key."""
    token = _uncovered.set(_uncovered.get() | frozenset(aliases))
    try:
        yield
    finally:
        _uncovered.reset(token)
        # A write SQLite prepared meanwhile is in its statement cache, never asked about
        # again: the guarded SQLite connections forget their cached statements.
        driver_cursors.expire()


class _Watch:
    def __init__(self, other: str, alias: str) -> None:
        self.other, self.alias = other, alias
        self.refused = self.reported = False

    def __call__(self, execute: Any, sql: object, params: Any, many: bool, context: Any) -> Any:
        self.check(sql)
        with driver_cursors.through_django():  # checked: the driver's cursor lets it pass
            return execute(sql, params, many, context)

    def check(self, sql: object) -> None:
        if is_write(sql) and self.other not in _uncovered.get():
            self._report()

    def _report(self) -> None:
        if refusing():
            self.refused = True
            raise UncoveredWrite(self.message())
        if not self.reported:
            self.reported = True
            logger.warning("%s", self.message())
            signals.send(signals.uncovered_write, "http", alias=self.other, database=self.alias)

    def message(self) -> str:
        if self.other == self.alias:
            return (
                f"A protected view wrote to its entries' database {self.alias!r} through "
                f"another connection (a worker thread's): that write is outside the "
                f"transaction that holds the claim, so it is not covered by the key (a retry "
                f"repeats it). Make it in the view's own thread, or wrap writes that may "
                f"repeat in idempotency_django.databases.uncovered({self.alias!r})."
            )
        return (
            f"A protected view wrote to the database {self.other!r}, but its idempotency "
            f"entry is in {self.alias!r}: that write is not covered by the key (a retry "
            f"repeats it). Keep the entry beside the business rows: set IDEMPOTENCY_DATABASE "
            f"(or database=...) to {self.other!r}, or to a callable choosing it per request; "
            f"or wrap writes that may repeat in idempotency_django.databases.uncovered("
            f"{self.other!r})."
        )


def refusing() -> bool:
    """Refuse under ``DEBUG`` or a test run, else warn.

    Django's test runner sets ``DEBUG = False``; what marks a test run is the
    ``django.core.mail.outbox`` its ``setup_test_environment()`` creates (pytest-django too).
    """
    return bool(settings.DEBUG) or hasattr(mail, "outbox")


def _name(chosen: Chooser) -> str:
    return f"{getattr(chosen, '__module__', '?')}.{getattr(chosen, '__qualname__', chosen)}"


__all__ = ["UncoveredWrite", "uncovered"]
