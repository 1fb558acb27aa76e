"""The unknown-setting warning (W080) and ``check --deploy``'s warnings, one test per id."""

from __future__ import annotations

import io
from typing import Any
from urllib.parse import urlsplit

import pytest
from celery import current_app
from django.apps import apps as django_apps
from django.core.management import call_command
from django.db import connections
from django.test import override_settings

from idempotency_django._operations import deploy_checks
from idempotency_django._operations.deploy_checks import (
    PURGE_TASK,
    check_deployment,
    check_setting_names,
    check_unknown,
)
from idempotency_django.outbox.checks import check_relay_scheduled

LOCMEM = "django.core.cache.backends.locmem.LocMemCache"
REDIS = "django_redis.cache.RedisCache"
MEMCACHED = "django.core.cache.backends.memcached.PyMemcacheCache"
BEAT = {"purge": {"task": PURGE_TASK, "schedule": 3600}}


def ids(messages: list[Any]) -> list[str]:
    return [message.id for message in messages]


def deploy_ids(**settings: Any) -> list[str]:
    with override_settings(**settings):
        return ids(check_deployment())


def test_a_misspelt_setting_names_the_nearest_valid_one() -> None:
    [message] = check_unknown(["IDEMPOTENCY_REQUIRD", "DEBUG", "IDEMPOTENCY_TTL"])
    assert message.id == "idempotency_django.W080"
    assert "IDEMPOTENCY_REQUIRD" in message.msg
    assert "Did you mean IDEMPOTENCY_REQUIRED?" in (message.hint or "")


def test_a_setting_like_nothing_known_says_so() -> None:
    [message] = check_unknown(["IDEMPOTENCY_XYZZY_PLUGH"])
    assert "not an idempotency_django setting" in (message.hint or "")


def test_every_known_setting_passes() -> None:
    assert check_unknown(deploy_checks.known_settings()) == []


def test_the_unknown_setting_check_reads_the_settings() -> None:
    with override_settings(IDEMPOTENCY_LEASES=30):
        assert ids(check_setting_names()) == ["idempotency_django.W080"]
    assert ids(check_setting_names()) == []


def test_w081_nothing_schedules_the_purge() -> None:
    assert "idempotency_django.W081" in deploy_ids(CELERY_BEAT_SCHEDULE={})


def test_w081_a_beat_schedule_in_settings_with_the_purge_passes() -> None:
    assert "idempotency_django.W081" not in deploy_ids(CELERY_BEAT_SCHEDULE=BEAT)


def test_w081_the_celery_apps_own_beat_schedule_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(current_app.conf, "beat_schedule", BEAT)
    assert "idempotency_django.W081" not in deploy_ids()


def test_w081_a_database_scheduler_is_not_second_guessed(monkeypatch: pytest.MonkeyPatch) -> None:
    # django-celery-beat keeps its schedule in the database: faked, not installed.
    monkeypatch.setattr(django_apps, "is_installed", "django_celery_beat".__eq__)
    assert deploy_checks.purge_scheduled() is None
    assert "idempotency_django.W081" not in deploy_ids(CELERY_BEAT_SCHEDULE={})
    assert deploy_checks.check_purge_scheduled(True) == []


def test_w082_a_local_memory_replay_cache() -> None:
    caches = {"default": {"BACKEND": LOCMEM}, "replay": {"BACKEND": LOCMEM}}
    found = deploy_ids(CACHES=caches, IDEMPOTENCY_CACHE="replay")
    assert "idempotency_django.W082" in found
    assert "idempotency_django.W082" not in deploy_ids(CACHES=caches, IDEMPOTENCY_CACHE=None)
    assert deploy_checks.check_cache_backend("replay", REDIS) == []


def test_w083_idle_timeout_disabled_on_postgresql() -> None:
    [message] = deploy_checks.check_idle_timeout_kept(None, "postgresql")
    assert message.id == "idempotency_django.W083"
    assert deploy_checks.check_idle_timeout_kept(300, "postgresql") == []
    assert deploy_checks.check_idle_timeout_kept(None, "sqlite") == []  # not applied there


def test_w084_entries_on_sqlite() -> None:
    [message] = deploy_checks.check_entries_on_sqlite("default", "sqlite")
    assert message.id == "idempotency_django.W084"
    assert deploy_checks.check_entries_on_sqlite("default", "postgresql") == []


@pytest.mark.every_database
def test_the_deploy_checks_read_the_entries_database() -> None:
    vendor = connections["default"].vendor
    found = deploy_ids(IDEMPOTENCY_IDLE_TIMEOUT=None)
    assert ("idempotency_django.W084" in found) is (vendor == "sqlite")
    assert ("idempotency_django.W083" in found) is (vendor == "postgresql")


@pytest.mark.parametrize(
    "message",
    [
        *check_unknown(["IDEMPOTENCY_REQUIRD"]),
        *deploy_checks.check_purge_scheduled(False),
        *deploy_checks.check_cache_backend("replay", LOCMEM),
        *deploy_checks.check_idle_timeout_kept(None, "postgresql"),
        *deploy_checks.check_entries_on_sqlite("default", "sqlite"),
        *check_relay_scheduled(False),
        *deploy_checks.check_tasks_not_eager(True),
        *deploy_checks.check_cache_read_raw("replay", MEMCACHED, False),
    ],
    ids=lambda message: message.id,
)
def test_every_warning_has_a_hint_and_a_docs_anchor(message: Any) -> None:
    url = message.hint.rsplit(" ", 1)[-1]
    assert url.startswith(deploy_checks.DOCS)
    assert urlsplit(url).fragment  # each anchor is asserted in the built docs (test_docs.py)


def test_w086_celery_runs_tasks_eagerly(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "idempotency_django.W086" in deploy_ids(CELERY_TASK_ALWAYS_EAGER=True)
    monkeypatch.setitem(current_app.conf, "task_always_eager", False)
    assert "idempotency_django.W086" not in deploy_ids(CELERY_TASK_ALWAYS_EAGER=False)
    monkeypatch.setitem(current_app.conf, "task_always_eager", True)
    assert "idempotency_django.W086" in deploy_ids(CELERY_TASK_ALWAYS_EAGER=False)


def test_w085_nothing_schedules_the_outbox_relay() -> None:
    from idempotency_django.outbox.checks import RELAY_TASK, check_outbox_deployment

    assert ids(check_outbox_deployment()) == ["idempotency_django.W085"]
    beat = {"relay": {"task": RELAY_TASK, "schedule": 30}}
    with override_settings(CELERY_BEAT_SCHEDULE=beat):
        assert check_outbox_deployment() == []


def test_manage_py_check_deploy_reports_them() -> None:
    caches = {"default": {"BACKEND": LOCMEM}, "replay": {"BACKEND": LOCMEM}}
    err = io.StringIO()
    with override_settings(CACHES=caches, IDEMPOTENCY_CACHE="replay", IDEMPOTENCY_LEASES=30):
        # CRITICAL: Django's own deploy errors (6.1's mail.E001 on the tests' locmem
        # mailer) must not stop the command before it reports ours.
        call_command(
            "check", "--deploy", "--fail-level", "CRITICAL", stdout=io.StringIO(), stderr=err
        )
    output = err.getvalue()
    for check_id in ("W080", "W081", "W082", "W085"):
        assert f"idempotency_django.{check_id}" in output
    assert "Did you mean IDEMPOTENCY_LEASE?" in output


def test_manage_py_check_without_deploy_leaves_the_deploy_warnings_out() -> None:
    err = io.StringIO()
    call_command("check", stdout=io.StringIO(), stderr=err)
    assert "idempotency_django.W08" not in err.getvalue()


def test_every_setting_the_package_names_is_known_to_w080() -> None:
    """A setting read somewhere but missing from checks._SINGLE would be called a typo."""
    from tests.test_docs import package_literals

    named = package_literals(r"IDEMPOTENCY_[A-Z_]+")
    assert "IDEMPOTENCY_TTL" in named
    assert check_unknown(named) == []


@pytest.mark.parametrize(
    ("cache", "warned"),
    [
        ({"BACKEND": REDIS, "LOCATION": "redis://127.0.0.1:6379/15"}, False),
        ({"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": "redis://"}, False),
        ({"BACKEND": MEMCACHED, "LOCATION": "127.0.0.1:11211"}, True),
        ({"BACKEND": "django.core.cache.backends.db.DatabaseCache", "LOCATION": "t"}, True),
        (
            {
                "BACKEND": REDIS,
                "LOCATION": ["redis://127.0.0.1:6379/15", "redis://127.0.0.1:6379/14"],
                "OPTIONS": {"CLIENT_CLASS": "django_redis.client.ShardClient"},
            },
            True,
        ),
        ({"BACKEND": LOCMEM}, False),  # no other writer; W082 says what is wrong with it
    ],
)
def test_w087_a_replay_cache_whose_backend_unpickles(cache: dict[str, Any], warned: bool) -> None:
    found = deploy_ids(
        CACHES={"default": {"BACKEND": LOCMEM}, "replay": cache}, IDEMPOTENCY_CACHE="replay"
    )
    assert ("idempotency_django.W087" in found) is warned
