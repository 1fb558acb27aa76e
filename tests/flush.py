"""What empties a transactional test's database after it (installed by ``tests/conftest.py``).

Django's ``flush`` after every transactional test costs what the tests themselves do not:

* On PostgreSQL its one ``TRUNCATE`` of the test database's ~20 tables makes a new file
  for each, synced at commit: 50 ms on a quiet machine, 300 ms under load. A test leaves a
  handful of rows: deleting them takes 1 ms (``delete_not_truncate``).
* On every database it deletes the content types and permissions, which its
  ``post_migrate`` then writes back, several queries per app: 130 ms of the 150 ms a
  transactional test's teardown took on PostgreSQL, on about a thousand tests per pass.
  Those rows are the schema's registry, the same before and after every test (no test
  adds a model), so they are kept, and the two receivers that would only find them in
  place (60 ms more) are left out of that ``post_migrate`` (``keep_the_registry``). Every
  other receiver runs as before: the package's own writes the secret and the database
  identity back.

With ``available_apps`` or ``serialized_rollback`` (no test here asks), Django's own.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.management import create_permissions
from django.contrib.contenttypes.management import create_contenttypes
from django.core.management.color import no_style
from django.core.management.sql import emit_post_migrate_signal
from django.db import connections
from django.db.backends.postgresql.operations import DatabaseOperations
from django.db.models.signals import post_migrate
from django.test import TransactionTestCase

# Written by migrate's post_migrate (contenttypes', auth's receivers), never by a test.
REGISTRY_TABLES = frozenset({"django_content_type", "auth_permission"})
_AUTH_UID = "django.contrib.auth.management.create_permissions"

_truncate: Any = None
_django_teardown: Any = None


def delete_not_truncate(
    self: Any, style: Any, tables: list[str], *, reset_sequences: bool = False, **kwargs: Any
) -> list[str]:
    """PostgreSQL's flush as DELETEs. Django's foreign keys on PostgreSQL are deferrable,
    so the order of the DELETEs does not matter inside the flush's transaction."""
    if reset_sequences or kwargs.get("allow_cascade") or not tables:
        truncated: list[str] = _truncate(
            self, style, tables, reset_sequences=reset_sequences, **kwargs
        )
        return truncated
    quoted = (style.SQL_FIELD(self.quote_name(table)) for table in tables)
    return ["SET CONSTRAINTS ALL DEFERRED;", *(f"DELETE FROM {table};" for table in quoted)]


def keep_the_registry(self: TransactionTestCase) -> None:
    """``flush`` as Django's teardown calls it, the registry's tables left out."""
    if self.available_apps is not None or self.serialized_rollback:
        _django_teardown(self)
        return
    for alias in self._databases_names(include_mirrors=False):  # type: ignore[attr-defined]
        connection = connections[alias]
        names = connection.introspection.django_table_names(only_existing=True)
        tables = [name for name in names if name not in REGISTRY_TABLES]
        connection.ops.execute_sql_flush(connection.ops.sql_flush(no_style(), tables))
        _post_migrate_but_the_registrys(alias)


def _post_migrate_but_the_registrys(alias: str) -> None:
    """``post_migrate`` without the receivers that write the kept tables (as the apps
    connect them: ``contenttypes.apps``, ``auth.apps``), which are connected again after."""
    post_migrate.disconnect(create_contenttypes)
    post_migrate.disconnect(dispatch_uid=_AUTH_UID)
    try:
        emit_post_migrate_signal(0, False, alias)
    finally:
        post_migrate.connect(create_contenttypes)
        post_migrate.connect(create_permissions, dispatch_uid=_AUTH_UID)


def install() -> None:
    """Both, once per process (pytest_configure may run again in the same process)."""
    global _truncate, _django_teardown
    if DatabaseOperations.sql_flush is not delete_not_truncate:
        _truncate = DatabaseOperations.sql_flush
        DatabaseOperations.sql_flush = delete_not_truncate  # type: ignore[method-assign,assignment]
    if TransactionTestCase._fixture_teardown is not keep_the_registry:  # type: ignore[attr-defined]
        _django_teardown = TransactionTestCase._fixture_teardown  # type: ignore[attr-defined]
        TransactionTestCase._fixture_teardown = keep_the_registry  # type: ignore[attr-defined]
