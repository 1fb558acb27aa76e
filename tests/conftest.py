"""Markers, service gating and shared fixtures.

A test that needs a service the machine lacks is skipped with the reason, except
under ``CI=true``, where it fails: CI must prove the guarantees, not skip them.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, connections

IN_CI = os.environ.get("CI", "").lower() == "true"


def service_missing(reason: str) -> None:
    """Skip, or fail under CI, because a service isn't there."""
    if IN_CI:
        pytest.fail(f"{reason} (CI=true: a missing service fails the run)")
    pytest.skip(reason)


def reachable(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=0.5).close()
    except OSError:
        return False
    return True


def pytest_configure(config: pytest.Config) -> None:
    for marker in (
        "requires_postgres: runs only when DATABASE_URL points at PostgreSQL",
        "requires_redis: needs Redis on 127.0.0.1:6379",
        "system: starts real servers (gunicorn, Celery workers)",
    ):
        config.addinivalue_line("markers", marker)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # PostgreSQL-only tests belong to the PostgreSQL pass of `make test`: on
    # SQLite they are deselected, not skipped.
    from django.conf import settings

    if _SKIP_ALL in config.stash:
        for item in items:
            item.add_marker(pytest.mark.skip(reason=config.stash[_SKIP_ALL]))
        return
    if settings.DATABASES["default"]["ENGINE"].endswith("postgresql"):
        return
    keep = [item for item in items if "requires_postgres" not in item.keywords]
    deselected = [item for item in items if "requires_postgres" in item.keywords]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = keep


def pytest_sessionstart(session: pytest.Session) -> None:
    from django.conf import settings

    db = settings.DATABASES["default"]
    address = (db.get("HOST") or "127.0.0.1", int(db.get("PORT") or 5432))
    if db["ENGINE"].endswith("postgresql") and not reachable(*address):
        reason = f"PostgreSQL at {address[0]}:{address[1]} is unreachable"
        if IN_CI:
            pytest.exit(f"{reason} (CI=true: a missing service fails the run)", returncode=1)
        session.config.stash[_SKIP_ALL] = reason


_SKIP_ALL = pytest.StashKey[str]()


@pytest.fixture
def redis_url() -> str:
    from django.conf import settings

    if not reachable("127.0.0.1", 6379):
        service_missing("Redis on 127.0.0.1:6379 is unreachable")
    return str(settings.REDIS_URL)


@pytest.fixture
def is_postgres() -> bool:
    return connection.vendor == "postgresql"


def close_connections_after(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a thread's work so its database connections close when it ends."""

    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        finally:
            connections.close_all()

    return run
