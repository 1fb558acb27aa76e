"""SQLite-only OPTIONS on another database (``idempotency_django.E085``).

The quick start's SQLite options copied into a PostgreSQL or MariaDB project:
``manage.py check`` used to pass, and the first connection failed
(``invalid connection option "transaction_mode"``, or a ``TypeError``).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from idempotency_django._operations.checks import SQLITE_ONLY_OPTIONS, check_sqlite_options

SNIPPET_OPTIONS = {"transaction_mode": "IMMEDIATE", "timeout": 20}


@pytest.mark.parametrize(
    ("engine", "server"),
    [
        ("django.db.backends.postgresql", "PostgreSQL"),
        ("django.contrib.gis.db.backends.postgis", "PostgreSQL"),
        ("django.db.backends.mysql", "MySQL/MariaDB"),
    ],
)
def test_e085_sqlite_options_on_another_engine(engine: str, server: str) -> None:
    (error,) = check_sqlite_options("default", engine, SNIPPET_OPTIONS)
    assert error.id == "idempotency_django.E085"
    assert "'transaction_mode', 'timeout'" in error.msg
    assert f"is {server} ({engine})" in error.msg


@pytest.mark.parametrize("name", SQLITE_ONLY_OPTIONS)
def test_e085_names_each_sqlite_only_option(name: str) -> None:
    (error,) = check_sqlite_options("db", "django.db.backends.postgresql", {name: 1})
    assert repr(name) in error.msg


@pytest.mark.parametrize(
    ("engine", "options"),
    [
        ("django.db.backends.sqlite3", SNIPPET_OPTIONS),
        ("django.db.backends.postgresql", {"pool": True, "isolation_level": 1}),
        ("django.db.backends.mysql", {"init_command": "SET sql_mode='STRICT_ALL_TABLES'"}),
        ("django.db.backends.postgresql", None),
        ("some.third_party.backend", SNIPPET_OPTIONS),  # we don't know what it takes
    ],
)
def test_e085_not_raised_where_the_options_fit(engine: str, options: Any) -> None:
    assert check_sqlite_options("default", engine, options) == []


def test_e085_fails_manage_py_check(monkeypatch: pytest.MonkeyPatch) -> None:
    copied = {"ENGINE": "django.db.backends.postgresql", "NAME": "x", "OPTIONS": SNIPPET_OPTIONS}
    monkeypatch.setitem(settings.DATABASES, "copied", copied)
    with pytest.raises(SystemCheckError, match=r"idempotency_django\.E085"):
        call_command("check")


@pytest.mark.every_database
def test_the_project_under_test_passes_e085() -> None:
    call_command("check")
