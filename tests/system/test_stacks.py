"""A worker killed mid-transaction on a Django Ninja operation, sync and ``async def``.

Served by the sample project under gunicorn (``tests.system.served_urls``'s
``/chaos/ninja/…``), under both protocols: nothing the killed worker wrote
survives, and the key's retries run the operation once.
"""

from __future__ import annotations

import pytest

from tests.system import chaos, scenarios
from tests.system.harness import SampleServer, ScratchDatabase, new_keys

pytestmark = [pytest.mark.system, pytest.mark.requires_postgres]

KILL = {"lock": scenarios.kill_mid_work, "lease": chaos.kill_mid_work}


@pytest.mark.parametrize("path", ["/chaos/ninja/charges", "/chaos/ninja/async/charges"])
def test_killed_worker_on_a_ninja_operation_commits_nothing_and_runs_once(
    server: SampleServer, scratch: ScratchDatabase, protocol: str, path: str
) -> None:
    key = new_keys(1, "ninja-kill")[0]
    assert KILL[protocol](server, scratch, key, path).problems == []
