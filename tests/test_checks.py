"""One test per system check id, and ``manage.py check`` failing on a bad value."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from idempotency_django._operations.checks import check_settings


def ids(**settings: Any) -> list[str]:
    with override_settings(**settings):
        return [message.id or "" for message in check_settings()]


def test_defaults_pass() -> None:
    assert ids() == []


@pytest.mark.parametrize(
    ("setting", "value", "check_id"),
    [
        ("IDEMPOTENCY_HEADER", "Idempotency Key", "E001"),
        ("IDEMPOTENCY_HEADER", 42, "E001"),
        ("IDEMPOTENCY_REQUIRED", "yes", "E002"),
        ("IDEMPOTENCY_TTL", 0, "E003"),
        ("IDEMPOTENCY_TTL", "1 day", "E003"),
        ("IDEMPOTENCY_TTL", float("nan"), "E003"),
        ("IDEMPOTENCY_TTL", float("inf"), "E003"),
        ("IDEMPOTENCY_TTL", 10**12, "E003"),  # SQLite stores an expiry past 9999 as NULL
        ("IDEMPOTENCY_TTL", 1e300, "E003"),  # beyond timedelta
        ("IDEMPOTENCY_LEASE", float("nan"), "E004"),
        ("IDEMPOTENCY_WAIT", float("inf"), "E014"),
        ("IDEMPOTENCY_WAIT", 30 * 86400, "E014"),  # PostgreSQL's lock_timeout is int ms
        ("IDEMPOTENCY_IDLE_TIMEOUT", float("nan"), "E016"),
        ("IDEMPOTENCY_IDLE_TIMEOUT", 30 * 86400, "E016"),
        ("IDEMPOTENCY_LEASE", -1, "E004"),
        ("IDEMPOTENCY_LEASE", None, "E004"),
        ("IDEMPOTENCY_TENANT_RESOLVER", "no.such.function", "E006"),
        ("IDEMPOTENCY_TENANT_RESOLVER", "django.conf.settings.DEBUG", "E006"),
        ("IDEMPOTENCY_KEY_MAX_LENGTH", 0, "E007"),
        ("IDEMPOTENCY_KEY_MAX_LENGTH", 256, "E007"),
        ("IDEMPOTENCY_KEY_MAX_LENGTH", True, "E007"),
        ("IDEMPOTENCY_DATABASE", "elsewhere", "E008"),
        ("IDEMPOTENCY_CACHE", "nowhere", "E009"),
        ("IDEMPOTENCY_DRF_ERROR_FORMAT", "xml", "E010"),
        ("IDEMPOTENCY_PREPARED_STATEMENTS", "yes", "E030"),
        ("IDEMPOTENCY_OPEN_LEGACY_ROWS", "False", "E124"),  # a non-empty string: truthy
        ("IDEMPOTENCY_OPEN_LEGACY_ROWS", 1, "E124"),
    ],
)
def test_each_bad_setting_has_its_own_id(setting: str, value: Any, check_id: str) -> None:
    assert ids(**{setting: value}) == [f"idempotency_django.{check_id}"]


def test_lease_must_be_shorter_than_ttl() -> None:
    assert ids(IDEMPOTENCY_LEASE=3600, IDEMPOTENCY_TTL=60) == ["idempotency_django.E005"]


@pytest.mark.parametrize(
    "settings",
    [
        {"IDEMPOTENCY_TTL": 3600, "IDEMPOTENCY_LEASE": 30.5},
        {"IDEMPOTENCY_CACHE": None},
        {"IDEMPOTENCY_CACHE": "replay"},
        {"IDEMPOTENCY_HEADER": "X-Request-Id"},
        {"IDEMPOTENCY_DRF_ERROR_FORMAT": "drf"},
        {"IDEMPOTENCY_OPEN_LEGACY_ROWS": True},
        {"IDEMPOTENCY_OPEN_LEGACY_ROWS": False},
        {"IDEMPOTENCY_REQUIRED": True},
        {"IDEMPOTENCY_REQUIRED": False},
        {"IDEMPOTENCY_TENANT_RESOLVER": lambda request: "acme"},
        {"IDEMPOTENCY_TENANT_RESOLVER": "django.utils.text.slugify"},
        {"IDEMPOTENCY_KEY_MAX_LENGTH": 1},
        {"IDEMPOTENCY_KEY_MAX_LENGTH": 255},
        {"IDEMPOTENCY_IDLE_TIMEOUT": None},
        {"IDEMPOTENCY_IDLE_TIMEOUT": 300},
        {"IDEMPOTENCY_PREPARED_STATEMENTS": None},
        {"IDEMPOTENCY_PREPARED_STATEMENTS": False},
    ],
)
def test_good_values_pass(settings: dict[str, Any]) -> None:
    assert ids(**settings) == []


def test_check_ids_are_unique() -> None:
    import inspect
    import re

    from idempotency_django._operations import checks

    found = re.findall(r'"(E\d{3})"', inspect.getsource(checks))
    assert len(found) == len(set(found))
    assert {f"E{n:03}" for n in range(1, 17)} | {"E020", "E030", "E060", "E070", "E071"} <= set(
        found
    )


@pytest.mark.django_db  # Django 6.1's check command also checks the database.
def test_manage_py_check_fails_on_a_bad_value() -> None:
    with override_settings(IDEMPOTENCY_TTL=-5), pytest.raises(SystemCheckError, match="E003"):
        call_command("check")


def test_unsupported_database_vendor_is_e011() -> None:
    from idempotency_django._operations.checks import check_database_vendor

    assert [m.id for m in check_database_vendor("default", "oracle")] == ["idempotency_django.E011"]
    assert check_database_vendor("default", "postgresql") == []
    assert check_database_vendor("default", "mysql") == []
    assert check_database_vendor("default", "sqlite") == []


def test_mysql_without_its_driver_is_e070_naming_the_system_packages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from idempotency_django._operations.checks import check_mysql_driver

    # A driver that imports (tox's environments don't install mysqlclient).
    monkeypatch.setitem(sys.modules, "MySQLdb", types.ModuleType("MySQLdb"))
    assert check_mysql_driver("default", "django.db.backends.mysql") == []
    assert check_mysql_driver("default", "django.db.backends.sqlite3") == []
    monkeypatch.setitem(sys.modules, "MySQLdb", None)
    [message] = check_mysql_driver("default", "django.db.backends.mysql")
    assert message.id == "idempotency_django.E070"
    assert "mysqlclient" in message.msg
    for package in ("[mysql]", "pkg-config", "build-essential", "default-libmysqlclient-dev"):
        assert package in (message.hint or "")


def test_e070_replaces_the_backends_import_error_in_the_settings_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from django.conf import settings

    monkeypatch.setitem(sys.modules, "MySQLdb", None)
    entries = {"ENGINE": "django.db.backends.mysql", "NAME": "x"}
    monkeypatch.setitem(settings.DATABASES, "mysql_entries", entries)
    with override_settings(IDEMPOTENCY_DATABASE="mysql_entries"):
        ids = [m.id for m in check_settings()]
    assert ids == ["idempotency_django.E070"]


@pytest.mark.parametrize(
    ("mariadb", "version", "ok"),
    [
        (True, (10, 5, 27), False),
        (True, (10, 6, 0), True),
        (True, (11, 4, 2), True),
        (False, (5, 7, 44), False),
        (False, (8, 0, 0), False),
        (False, (8, 0, 1), True),
        (False, (8, 4, 3), True),
    ],
)
def test_mysql_servers_without_skip_locked_are_e071(
    mariadb: bool, version: tuple[int, ...], ok: bool
) -> None:
    from idempotency_django._operations.checks import check_mysql_version

    messages = check_mysql_version("default", mariadb, version)
    assert [m.id for m in messages] == ([] if ok else ["idempotency_django.E071"])
    if not ok:
        assert ("MariaDB 10.6" if mariadb else "MySQL 8.0.1") in messages[0].msg


@pytest.mark.parametrize(
    ("offset", "warned"), [(0, False), (59, False), (3600, True), (-7200, True)]
)
def test_mysql_sessions_off_utc_are_w070(offset: int, warned: bool) -> None:
    from idempotency_django._operations.checks import check_mysql_clock

    messages = check_mysql_clock("default", offset)
    assert [m.id for m in messages] == (["idempotency_django.W070"] if warned else [])
    if warned:
        assert "time_zone = '+00:00'" in (messages[0].hint or "")


@pytest.mark.requires_mysql
@pytest.mark.django_db
def test_a_mysql_session_in_another_zone_is_w070() -> None:
    from django.core.checks import run_checks
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SET time_zone = '+03:00'")
    try:
        found = [str(m.id) for m in run_checks(databases=["default"])]
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET time_zone = '+00:00'")
    assert "idempotency_django.W070" in found


@pytest.mark.requires_mysql
@pytest.mark.django_db
def test_this_mysql_server_passes_the_database_checks() -> None:
    from django.core.checks import run_checks

    found = [str(m.id) for m in run_checks(databases=["default"])]
    ids = [i for i in found if i.startswith("idempotency")]
    assert ids == []


@pytest.mark.django_db
def test_the_database_checks_pass_on_this_server_whichever_it_is() -> None:
    from django.core.checks import run_checks

    from idempotency_django._operations.checks import check_mysql_server

    # On SQLite and PostgreSQL the MySQL server check asks nothing; MySQL passes it.
    assert check_mysql_server(databases=["default"]) == []
    found = [str(m.id) for m in run_checks(databases=["default"])]
    assert [i for i in found if i.startswith("idempotency")] == []


@pytest.mark.parametrize(
    ("vendor", "phrase"),
    [
        ("unknown", "is an unknown database"),
        ("oracle", "is an oracle"),
    ],
)
def test_e011_names_the_alias_and_the_vendor_with_its_article(vendor: str, phrase: str) -> None:
    from idempotency_django._operations.checks import check_database_vendor

    [message] = check_database_vendor("entries", vendor)
    assert message.msg.startswith(f"IDEMPOTENCY_DATABASE 'entries' {phrase}")


_SWITCH = "idempotency_django.middleware.IdempotencyMiddleware"
_CSRF = "django.middleware.csrf.CsrfViewMiddleware"
_LOGIN_REQUIRED = "django.contrib.auth.middleware.LoginRequiredMiddleware"
_SESSIONS = "django.contrib.sessions.middleware.SessionMiddleware"
_AUTH = "django.contrib.auth.middleware.AuthenticationMiddleware"


@pytest.mark.parametrize("after", [_CSRF, _LOGIN_REQUIRED])
def test_the_middleware_before_one_with_process_view_is_an_error(after: str) -> None:
    from idempotency_django._operations.checks import check_middleware_order

    with override_settings(MIDDLEWARE=[_SESSIONS, _AUTH, _SWITCH, after]):
        [error] = check_middleware_order()
    assert error.id == "idempotency_django.E091"
    assert after in error.msg


def test_the_middleware_last_or_absent_passes_the_order_check() -> None:
    from idempotency_django._operations.checks import check_middleware_order

    with override_settings(MIDDLEWARE=[_SESSIONS, _CSRF, _AUTH, _LOGIN_REQUIRED, _SWITCH]):
        assert check_middleware_order() == []
    with override_settings(MIDDLEWARE=[_SESSIONS, _CSRF, _AUTH]):
        assert check_middleware_order() == []


def test_a_middleware_that_does_not_import_is_left_to_django_s_own_error() -> None:
    from idempotency_django._operations.checks import check_middleware_order

    missing = "no_such_package.middleware.Gone"
    with override_settings(MIDDLEWARE=[_SESSIONS, _AUTH, _SWITCH, missing]):
        assert check_middleware_order() == []
    with override_settings(MIDDLEWARE=[_SESSIONS, _AUTH, _SWITCH, missing, _CSRF]):
        [error] = check_middleware_order()
    assert _CSRF in error.msg
    assert missing not in error.msg
