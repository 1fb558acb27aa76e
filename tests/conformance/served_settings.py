"""The sample project as the system tier serves it, with the conformance test hooks on."""

from __future__ import annotations

from tests.system.served_settings import *  # noqa: F403

IDEMPOTENCY_CONFORMANCE_HOOKS = True

if DATABASES["default"]["ENGINE"].endswith("sqlite3"):  # noqa: F405
    DATABASES["default"]["OPTIONS"].pop("application_name", None)  # noqa: F405
