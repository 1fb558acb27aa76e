"""This directory runs under ``--ds tests.pooled.settings`` only."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    from django.conf import settings

    return not hasattr(settings, "POOLER") or None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test for one pooler is deselected in the other's pass (not skipped: CI fails skips)."""
    from django.conf import settings

    pooler = getattr(settings, "POOLER", None)
    other = [i for i in items if (m := i.get_closest_marker("pooler")) and m.args[0] != pooler]
    if other:
        config.hook.pytest_deselected(items=other)
        items[:] = [item for item in items if item not in other]


@pytest.fixture(scope="session", autouse=True)
def _release_pgbouncer_servers(django_db_setup: None) -> Iterator[None]:
    """PgBouncer keeps server connections to the test database open, pooled: drop them
    before pytest-django drops the database (torn down before ``django_db_setup``)."""
    yield
    from django.conf import settings

    if getattr(settings, "POOLER", None) != "pgbouncer":
        return
    import psycopg

    db = settings.DATABASES["default"]
    admin = f"postgresql://{db['USER'] or 'postgres'}@{db['HOST']}:{db['PORT']}/pgbouncer"
    with psycopg.connect(admin, autocommit=True, prepare_threshold=None) as conn:
        conn.execute(f"KILL {db['NAME']}")
        conn.execute(f"RESUME {db['NAME']}")  # KILL also holds new clients back until RESUME
