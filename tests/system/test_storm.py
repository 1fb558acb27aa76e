"""Storms of duplicates from many client threads against several gunicorn workers."""

from __future__ import annotations

import pytest

from tests.system.chaos import StormPlan, Verdict, judge, storm
from tests.system.harness import Monkey, SampleServer, ScratchDatabase
from tests.system.scenarios import summary

# A storm's length is the machine's throughput: the timeout only bounds a broken run.
pytestmark = [pytest.mark.system, pytest.mark.requires_postgres, pytest.mark.timeout(1800)]
STORM_KEYS = 300


def test_storm_commits_each_key_exactly_once(
    server: SampleServer, scratch: ScratchDatabase, protocol: str
) -> None:
    """300 keys, each sent by 8 concurrent clients, a quarter of them sending again later.

    CI's size (``make stress`` runs the long storms): every key still meets its seven
    duplicates at once, which is what the promise is about; more keys only add time.
    """
    answers = storm(server.port, StormPlan(keys=STORM_KEYS, per_key=8, clients=32, seed=6))
    verdict = judge(answers, scratch)
    print(f"\nstorm ({protocol}): {summary(verdict)}")
    assert verdict.broken() == []
    assert verdict.originals == verdict.keys == STORM_KEYS
    assert verdict.requests >= 8 * STORM_KEYS
    assert verdict.duplicates_committed == 0


def test_storm_with_killed_workers_and_terminated_backends(
    server: SampleServer, scratch: ScratchDatabase, protocol: str
) -> None:
    """The bounded twin of ``make stress``: rounds of storms until the monkey has done both.

    The monkey strikes only requests waiting at its gate, mid-transaction: each of its
    strikes lands in a request, so the rounds end once it has struck three times each way.
    """
    verdicts: list[Verdict] = []
    with Monkey(server, scratch, interval=0.5, budget=3, seed=6) as monkey:
        round_ = 0
        while not monkey.done:
            answers = storm(
                server.port, StormPlan(keys=50, seed=round_, slow_share=1), prefix="chaos"
            )
            verdicts.append(judge(answers, scratch, chaos=True))
            round_ += 1
    print(f"\nchaos ({protocol}): killed {monkey.killed}, terminated {monkey.terminated}")
    for verdict in verdicts:
        print(f"  {summary(verdict)}")
        assert verdict.broken() == []
    assert _hit(verdicts), "a killed worker's or a terminated backend's request went unseen"


def _hit(verdicts: list[Verdict]) -> bool:
    return any(v.server_errors for v in verdicts) and any(v.dropped for v in verdicts)
