"""This directory runs under its own settings (``--ds tests.multidb.settings``) only."""

from __future__ import annotations

from pathlib import Path

import pytest


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    from django.conf import settings

    return "shard1" not in settings.DATABASES or None
