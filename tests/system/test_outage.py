"""The entries' database unreachable: a TCP proxy we own between gunicorn and PostgreSQL is cut.

The shared PostgreSQL server itself is never stopped.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings

from tests.system import chaos
from tests.system.chaos import StormPlan
from tests.system.harness import (
    CHARGES_TABLE,
    SampleServer,
    ScratchDatabase,
    TcpProxy,
    new_keys,
    with_port,
)
from tests.system.scenarios import summary

# A storm's length is the machine's throughput: the timeout only bounds a broken run.
pytestmark = [pytest.mark.system, pytest.mark.requires_postgres, pytest.mark.timeout(1800)]


@pytest.fixture(scope="module")
def proxy() -> Iterator[TcpProxy]:
    tcp = TcpProxy(int(settings.DATABASES["default"].get("PORT") or 5432))
    try:
        yield tcp
    finally:
        tcp.close()


@pytest.fixture(scope="module")
def proxied(
    scratch: ScratchDatabase, proxy: TcpProxy, logs: Path, protocol: str
) -> Iterator[SampleServer]:
    url = with_port(scratch.url, proxy.port)
    log = logs / f"proxied-{protocol}.log"
    with SampleServer(url, log, workers=2, lease=8, protocol=protocol) as server:
        yield server


def test_unreachable_database_is_503_nothing_runs_and_service_resumes(
    proxied: SampleServer, proxy: TcpProxy, scratch: ScratchDatabase
) -> None:
    outcome = chaos.database_outage(proxied, proxy, scratch, new_keys(20, "outage"))
    assert outcome.problems == []


def test_database_cut_mid_storm_duplicates_nothing(
    proxied: SampleServer, proxy: TcpProxy, scratch: ScratchDatabase, protocol: str
) -> None:
    cut = threading.Thread(target=_cut_once_charged, args=(scratch, proxy), daemon=True)
    cut.start()
    answers = chaos.storm(proxied.port, StormPlan(keys=150, clients=16), prefix="cut")
    cut.join(60)
    verdict = chaos.judge(answers, scratch, chaos=True)
    print(f"\ncut mid-storm ({protocol}): {summary(verdict)}")
    assert verdict.broken() == []
    assert verdict.server_errors > 0, "the cut came after the storm"


def _cut_once_charged(scratch: ScratchDatabase, proxy: TcpProxy, count: int = 20) -> None:
    """Cut once the storm has committed ``count`` charges (it is mid-flight then), and restore
    once requests have found the database gone (each refused connection is one)."""
    deadline = time.monotonic() + 300  # bounds a broken run only
    query = f"SELECT count(*) FROM {CHARGES_TABLE} WHERE description LIKE 'cut-%%'"
    while scratch.rows(query)[0][0] < count and time.monotonic() < deadline:
        time.sleep(0.05)
    proxy.cut()
    try:
        proxy.wait_refused(5)
    finally:
        proxy.restore()
