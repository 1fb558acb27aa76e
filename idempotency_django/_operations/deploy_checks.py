"""Checks beyond one setting's value: a misspelt setting, and ``check --deploy``'s warnings.

The deploy checks flag what is fine on a laptop and wrong in production. Each names
its docs section; a project that has it covered another way silences it the way
Django intends: ``SILENCED_SYSTEM_CHECKS = ["idempotency_django.W081"]``.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.checks import CheckMessage, Tags, Warning, register
from django.db import connections

from idempotency_django._operations import checks
from idempotency_django.exceptions import PROBLEM_BASE

DOCS = PROBLEM_BASE.rsplit("/", 1)[0] + "/"
PREFIX = "IDEMPOTENCY_"
PURGE_TASK = "idempotency_django.tasks.purge_idempotency"
# Per-process stores: each worker would keep its own replay cache.
_LOCAL_CACHES = frozenset(
    {
        "django.core.cache.backends.locmem.LocMemCache",
        "django.core.cache.backends.dummy.DummyCache",
    }
)


def known_settings() -> frozenset[str]:
    """Every setting the app reads: those with a check of their own."""
    return frozenset(name for name, _check in checks._SINGLE)


def warning(check_id: str, msg: str, hint: str, anchor: str) -> list[CheckMessage]:
    page, _, fragment = anchor.partition("#")
    hint = f"{hint} See {DOCS}{page}.html#{fragment}"
    return [Warning(msg, hint=hint, id=f"idempotency_django.{check_id}")]


def check_unknown(names: Iterable[str]) -> list[CheckMessage]:
    known, messages = known_settings(), []
    for name in sorted(n for n in names if n.startswith(PREFIX) and n not in known):
        guess = (
            f"Did you mean {nearest}?"
            if (nearest := _nearest(name, known))
            else ("It is not an idempotency_django setting.")
        )
        messages += warning(
            "W080",
            f"{name} is not a setting idempotency_django reads.",
            guess,
            "settings#check-w080",
        )
    return messages


def _nearest(name: str, known: Iterable[str]) -> str | None:
    # Compared without the prefix they share, which would make every name look close.
    suffixes = {setting.removeprefix(PREFIX): setting for setting in known}
    close = difflib.get_close_matches(name.removeprefix(PREFIX), suffixes, n=1)
    return suffixes[close[0]] if close else None


@register(Tags.compatibility)
def check_setting_names(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """A misspelt ``IDEMPOTENCY_*`` setting is otherwise silently ignored."""
    return check_unknown(dir(settings))


def beat_tasks(schedule: Mapping[str, Any] | None) -> set[str]:
    return {str(entry.get("task")) for entry in (schedule or {}).values()}


def scheduled(task: str) -> bool | None:
    """Whether beat runs ``task``; ``None`` when the schedule lives elsewhere (a database)."""
    if apps.is_installed("django_celery_beat"):
        return None  # its schedule is in the database, which checks don't read
    tasks = beat_tasks(getattr(settings, "CELERY_BEAT_SCHEDULE", None))
    celery = sys.modules.get("celery")
    if celery is not None:  # the project's app configured, e.g. by app.conf.beat_schedule
        tasks |= beat_tasks(celery.current_app.conf.beat_schedule)
    return task in tasks


def purge_scheduled() -> bool | None:
    return scheduled(PURGE_TASK)


def check_purge_scheduled(scheduled: bool | None) -> list[CheckMessage]:
    if scheduled is not False:
        return []
    return warning(
        "W081",
        "Nothing schedules the purge of idempotency entries: expired entries and abandoned "
        "claims stay in the table for ever.",
        f"Add {PURGE_TASK} to CELERY_BEAT_SCHEDULE, or run `manage.py purge_idempotency` "
        'from cron and add "idempotency_django.W081" to SILENCED_SYSTEM_CHECKS.',
        "operations#check-w081",
    )


def check_cache_backend(alias: str | None, backend: str) -> list[CheckMessage]:
    if alias is None or backend not in _LOCAL_CACHES:
        return []
    return warning(
        "W082",
        f"IDEMPOTENCY_CACHE {alias!r} is a per-process cache ({backend.rsplit('.', 1)[-1]}): "
        "each worker keeps its own copy, so replays mostly miss it and every worker holds "
        "the answers in memory.",
        "Point it at a cache shared by every server (django-redis), or set it to None.",
        "operations#check-w082",
    )


def check_cache_read_raw(alias: str | None, backend: str, raw: bool) -> list[CheckMessage]:
    """A replay cache the library cannot read as raw bytes: its backend unpickles."""
    if alias is None or raw or backend in _LOCAL_CACHES:
        return []  # a per-process cache has no other writer (and W082 covers it)
    return warning(
        "W087",
        f"IDEMPOTENCY_CACHE {alias!r} ({backend.rsplit('.', 1)[-1]}) is read through the "
        "cache API, whose backend unpickles every value it reads: whoever can write to that "
        "cache can run code in the app server. The seal protects what a replay sends, not "
        "this.",
        "Use django-redis's default client or Django's RedisCache (read as raw bytes, "
        "authenticated before anything is decoded), or keep writers out of that cache.",
        "security#check-w087",
    )


# Read through their own redis-py client, as bytes (cache.raw_client): nothing unpickled.
_RAW_CACHES = frozenset(
    {"django_redis.cache.RedisCache", "django.core.cache.backends.redis.RedisCache"}
)


def read_raw(cache: Any) -> bool:
    """Whether the replay cache is read as raw bytes (django-redis's sharded or herd
    client is not: it goes through the cache API)."""
    if _backend(cache) not in _RAW_CACHES:
        return False
    options = cache.get("OPTIONS", {})
    client = str(options.get("CLIENT_CLASS", "django_redis.client.DefaultClient"))
    return client == "django_redis.client.DefaultClient"


def check_idle_timeout_kept(value: Any, vendor: str) -> list[CheckMessage]:
    if value is not None or vendor != "postgresql":
        return []
    return warning(
        "W083",
        "IDEMPOTENCY_IDLE_TIMEOUT is None: a protected view's transaction left idle (a hung "
        "worker, a lost TCP close) holds its key, every retry answering 409, until its "
        "connection dies.",
        "Keep a bound (the default is 300 seconds) longer than any view's idle pause.",
        "operations#check-w083",
    )


def check_entries_on_sqlite(alias: str, vendor: str) -> list[CheckMessage]:
    if vendor != "sqlite":
        return []
    return warning(
        "W084",
        f"IDEMPOTENCY_DATABASE {alias!r} is SQLite: one machine, one writer at a time.",
        "Keep the entries on PostgreSQL (or MySQL/MariaDB) in production.",
        "operations#check-w084",
    )


def _backend(cache: Any) -> str:
    return str(cache.get("BACKEND", "")) if isinstance(cache, dict) else ""


def tasks_eager() -> bool:
    """Celery runs tasks in the caller's process (``task_always_eager``): a development mode."""
    if getattr(settings, "CELERY_TASK_ALWAYS_EAGER", False) is True:
        return True
    celery = sys.modules.get("celery")
    return celery is not None and celery.current_app.conf.task_always_eager is True


def check_tasks_not_eager(eager: bool) -> list[CheckMessage]:
    if not eager:
        return []
    return warning(
        "W086",
        "Celery runs tasks eagerly (task_always_eager): every task, idempotent ones "
        "included, runs inside the request that sends it, and a delivery meeting a held key "
        "is retried at once, up to max_retries, instead of waiting for the holder.",
        "Run a broker and workers in production; keep eager mode for development and tests.",
        "operations#check-w086",
    )


def check_conformance_hooks_off(on: bool) -> list[CheckMessage]:
    if not on:
        return []
    return warning(
        "W151",
        "IDEMPOTENCY_CONFORMANCE_HOOKS is on: any caller can make a protected view fail or "
        "hold its transaction open with a request header.",
        "Turn the conformance test hooks on for a test or staging deployment only.",
        "verify#check-w151",
    )


@register(Tags.compatibility, deploy=True)
def check_deployment(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """What is fine in development and wrong in production (``manage.py check --deploy``)."""
    messages = check_purge_scheduled(purge_scheduled())
    messages += check_tasks_not_eager(tasks_eager())
    messages += check_conformance_hooks_off(
        getattr(settings, "IDEMPOTENCY_CONFORMANCE_HOOKS", False) is True
    )
    cache = getattr(settings, "IDEMPOTENCY_CACHE", None)
    if isinstance(cache, str) and cache in settings.CACHES:
        configured = settings.CACHES[cache]
        messages += check_cache_backend(cache, _backend(configured))
        messages += check_cache_read_raw(cache, _backend(configured), read_raw(configured))
    alias = getattr(settings, "IDEMPOTENCY_DATABASE", "default")
    if isinstance(alias, str) and alias in settings.DATABASES:
        vendor = connections[alias].vendor
        idle = getattr(settings, "IDEMPOTENCY_IDLE_TIMEOUT", 300)
        messages += check_idle_timeout_kept(idle, vendor)
        messages += check_entries_on_sqlite(alias, vendor)
    return messages
