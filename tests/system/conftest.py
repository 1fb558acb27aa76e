"""The system tier: the sample project under gunicorn, on a scratch PostgreSQL database.

One server per protocol ("lock", then "lease"; ``IDEMPOTENCY_PROTOCOL`` in the
served settings) and one database, ``idem_sys_test_<pid>``, serve the whole
tier; each scenario uses keys of its own, so they never see each other's rows.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.conf import settings

from bench import chaos
from bench.chaos import Gunicorn, ScratchDatabase
from tests.conftest import service_missing

LEASE = 8  # seconds: long enough that "409 until the lease passes" is seen, short to wait out
WORKERS = 4
SERVED_SETTINGS = "tests.system.served_settings"


@pytest.fixture(scope="session")
def scratch() -> Iterator[ScratchDatabase]:
    if importlib.util.find_spec("gunicorn") is None:
        service_missing("gunicorn is not installed")
    database = ScratchDatabase(settings.DATABASE_URL, "test")
    database.create()
    try:
        yield database
    finally:
        database.drop()


@pytest.fixture(scope="session")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gunicorn")


@pytest.fixture(scope="session", params=["lock", "lease"])
def protocol(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@contextmanager
def serving_protocol(protocol: str) -> Iterator[None]:
    """Servers started inside read ``protocol`` from the environment they inherit."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(chaos, "SETTINGS", SERVED_SETTINGS)
        patch.setenv("IDEMPOTENCY_PROTOCOL", protocol)
        yield


@pytest.fixture(scope="session")
def server(scratch: ScratchDatabase, logs: Path, protocol: str) -> Iterator[Gunicorn]:
    gunicorn = Gunicorn(scratch.url, logs / f"server-{protocol}.log", workers=WORKERS, lease=LEASE)
    try:
        with serving_protocol(protocol):
            gunicorn.start()
        yield gunicorn
    finally:
        gunicorn.stop()
