"""One test per system check id, and ``manage.py check`` failing on a bad value."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from idempotency_django.checks import check_settings


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
    ],
)
def test_good_values_pass(settings: dict[str, Any]) -> None:
    assert ids(**settings) == []


def test_check_ids_are_unique() -> None:
    import inspect
    import re

    from idempotency_django import checks

    found = re.findall(r'"(E\d{3})"', inspect.getsource(checks))
    assert len(found) == len(set(found)) == 17


@pytest.mark.django_db  # Django 6.1's check command also checks the database.
def test_manage_py_check_fails_on_a_bad_value() -> None:
    with override_settings(IDEMPOTENCY_TTL=-5), pytest.raises(SystemCheckError, match="E003"):
        call_command("check")


def test_unsupported_database_vendor_is_e011() -> None:
    from idempotency_django.checks import check_database_vendor

    assert [m.id for m in check_database_vendor("default", "mysql")] == ["idempotency_django.E011"]
    assert check_database_vendor("default", "postgresql") == []
    assert check_database_vendor("default", "sqlite") == []


@pytest.mark.parametrize(
    ("vendor", "phrase"),
    [
        ("unknown", "is an unknown database"),
        ("mysql", "is a mysql database"),
        ("oracle", "is an oracle"),
    ],
)
def test_e011_names_the_alias_and_the_vendor_with_its_article(vendor: str, phrase: str) -> None:
    from idempotency_django.checks import check_database_vendor

    [message] = check_database_vendor("entries", vendor)
    assert message.msg.startswith(f"IDEMPOTENCY_DATABASE 'entries' {phrase}")
