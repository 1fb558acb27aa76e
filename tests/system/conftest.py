"""The system tier: the sample project under gunicorn, on a scratch PostgreSQL database.

One server per protocol ("lock", then "lease"; ``IDEMPOTENCY_PROTOCOL`` in the
served settings) and one database, ``idem_sys_test_<pid>``, serve the whole
tier; each scenario uses keys of its own, so they never see each other's rows.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings

from tests.conftest import service_missing
from tests.system.harness import SampleServer, ScratchDatabase

LEASE = 8  # seconds: long enough that "409 until the lease passes" is seen, short to wait out
WORKERS = 4


@pytest.fixture(scope="session")
def scratch() -> Iterator[ScratchDatabase]:
    if importlib.util.find_spec("gunicorn") is None:
        service_missing("gunicorn is not installed")
    database = ScratchDatabase.tagged(settings.DATABASE_URL, "test")
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


@pytest.fixture(scope="session")
def server(scratch: ScratchDatabase, logs: Path, protocol: str) -> Iterator[SampleServer]:
    log = logs / f"server-{protocol}.log"
    with SampleServer(scratch.url, log, WORKERS, LEASE, protocol) as gunicorn:
        yield gunicorn
