"""A worker killed, a backend terminated, a request outliving its lease: mid-transaction."""

from __future__ import annotations

import pytest

from bench import chaos
from bench.chaos import Gunicorn, ScratchDatabase

pytestmark = [pytest.mark.system, pytest.mark.requires_postgres]


def test_killed_worker_commits_nothing_and_its_key_runs_once_after_the_lease(
    server: Gunicorn, scratch: ScratchDatabase
) -> None:
    outcome = chaos.kill_mid_work(server, scratch, chaos.new_keys(1, "kill")[0])
    assert outcome.problems == []


def test_purge_reclaims_a_killed_workers_claim_once_its_lease_has_passed(
    server: Gunicorn, scratch: ScratchDatabase
) -> None:
    outcome = chaos.purge_reclaims_abandoned(server, scratch, chaos.new_keys(1, "purge")[0])
    assert outcome.problems == []


def test_terminated_backend_is_a_5xx_with_nothing_committed_and_the_retry_runs_once(
    server: Gunicorn, scratch: ScratchDatabase
) -> None:
    outcome = chaos.terminate_mid_transaction(server, scratch, chaos.new_keys(1, "term")[0])
    assert outcome.problems == []


def test_request_outliving_its_lease_is_neither_taken_over_nor_purged(
    server: Gunicorn, scratch: ScratchDatabase
) -> None:
    outcome = chaos.outlive_lease(server, scratch, chaos.new_keys(1, "outlive")[0])
    assert outcome.problems == []
