"""This directory runs under its own settings (``--ds tests.multidb.settings``) only."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from idempotency_django import databases, signals


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    from django.conf import settings

    return "shard1" not in settings.DATABASES or None


@pytest.fixture
def reported_uncovered(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Production's watch (it reports instead of refusing): the aliases it reported."""
    monkeypatch.setattr(databases, "refusing", lambda: False)
    reported: list[str] = []

    def receiver(sender: object, alias: str, **kwargs: object) -> None:
        reported.append(alias)

    signals.uncovered_write.connect(receiver)
    try:
        yield reported
    finally:
        signals.uncovered_write.disconnect(receiver)
