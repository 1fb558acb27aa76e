"""A worker killed, a backend terminated, a request outliving its lease: mid-transaction.

Under both protocols: "lease" leaves a killed worker's claim until its lease
passes (``tests.system.chaos``'s scenarios); "lock" leaves nothing, so the retry runs at
once (``tests.system.scenarios``).
"""

from __future__ import annotations

import pytest

from tests.system import chaos, scenarios
from tests.system.harness import SampleServer, ScratchDatabase, charge, new_keys

pytestmark = [pytest.mark.system, pytest.mark.requires_postgres]


def test_served_protocol_is_in_force(
    server: SampleServer, scratch: ScratchDatabase, protocol: str
) -> None:
    """Mid-flight, "lease" shows its committed claim and "lock" shows none."""
    key = new_keys(1, "proto")[0]
    flight = chaos.start_slow(server.port, scratch, key)
    problems = scenarios.in_flight_entry(scratch, key, protocol)
    answers = [flight.answer(), charge(server.port, key, flight.path)]
    assert problems + chaos.executed_once(scratch, key, answers) == []


def test_killed_worker_commits_nothing_and_its_key_runs_once(
    server: SampleServer, scratch: ScratchDatabase, protocol: str
) -> None:
    """ "lease": 409 until the lease passes, then one run. "lock": the first retry runs."""
    key = new_keys(1, "kill")[0]
    assert scenarios.TARGETED[protocol]["kill"](server, scratch, key).problems == []


def test_purge_after_a_killed_worker(
    server: SampleServer, scratch: ScratchDatabase, protocol: str
) -> None:
    """ "lease": purge reclaims the claim once its lease passed. "lock": nothing to reclaim."""
    key = new_keys(1, "purge")[0]
    assert scenarios.TARGETED[protocol]["purge"](server, scratch, key).problems == []


def test_terminated_backend_is_a_5xx_with_nothing_committed_and_the_retry_runs_once(
    server: SampleServer, scratch: ScratchDatabase, protocol: str
) -> None:
    key = new_keys(1, "term")[0]
    assert scenarios.TARGETED[protocol]["terminate"](server, scratch, key).problems == []


def test_request_outliving_its_lease_is_neither_taken_over_nor_purged(
    server: SampleServer, scratch: ScratchDatabase, protocol: str
) -> None:
    key = new_keys(1, "outlive")[0]
    assert scenarios.TARGETED[protocol]["outlive"](server, scratch, key).problems == []
