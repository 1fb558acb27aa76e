"""The crash scenarios as the "lock" protocol must pass them ("lease"'s: ``tests.system.chaos``).

Under "lock" the claim is the first statement of the view's transaction: while
a request runs, no entry is visible; a crash is a plain rollback, so there is no
abandoned claim, nothing for the retry to wait for and nothing for purge.
Each scenario returns what broke, as ``tests.system.chaos``'s do (empty: the promise held).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta

from tests.system import chaos
from tests.system.chaos import Outcome, Verdict, expect
from tests.system.harness import (
    SHORT_LEASE_CHARGES,
    SLOW_CHARGES,
    Answer,
    SampleServer,
    ScratchDatabase,
    charge,
    manage,
    wait_for_clock,
)

SHORT_LEASE = timedelta(seconds=2)  # ``served_urls``'s short-lease view


def in_flight_entry(database: ScratchDatabase, key: str, protocol: str) -> list[str]:
    """What a running request's claim looks like from outside, per protocol."""
    entry = database.entries([key]).get(key)
    if protocol == "lock":
        return expect(entry is None, f"{key}: a lock claim visible before its commit: {entry}")
    return expect(
        entry is not None and entry[0] == "in_progress", f"{key}: lease claim in flight: {entry}"
    )


def gone(database: ScratchDatabase, pid: int, within: float = 300) -> bool:
    """Whether backend ``pid`` ended (PostgreSQL noticed its client died); ``within`` bounds
    only a broken run."""
    deadline = time.monotonic() + within
    query = "SELECT 1 FROM pg_stat_activity WHERE pid = %s"
    while database.rows(query, (pid,)):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def kill_mid_work(
    server: SampleServer, database: ScratchDatabase, key: str, path: str = SLOW_CHARGES
) -> Outcome:
    """SIGKILL between the charge's INSERT and COMMIT: nothing left; the retry runs at once."""
    flight = chaos.start_slow(server.port, database, key, path)
    assert flight.backend is not None
    problems = in_flight_entry(database, key, "lock")
    killed = server.kill_worker(flight.backend.worker)
    answer = flight.answer()
    problems += expect(killed, f"{key}: worker {flight.backend.worker} is not one of ours")
    problems += expect(answer.status == 0, f"{key}: the killed worker answered {answer.status}")
    problems += expect(gone(database, flight.backend.pid), f"{key}: its backend lives on")
    problems += nothing_left(database, key)
    # Nothing left: the first retry runs (a 409 would mean the dead request still held the key).
    answers = [charge(server.port, key, flight.path)]
    first = answers[0]
    problems += expect(
        first.status == 201 and not first.replayed,
        f"{key}: the first retry got {first.status} (replayed: {first.replayed}), not a run",
    )
    answers.append(charge(server.port, key, flight.path))
    problems += chaos.executed_once(database, key, answers)
    return Outcome("kill", key, 1 + len(answers), problems)


def purge_after_kill(server: SampleServer, database: ScratchDatabase, key: str) -> Outcome:
    """A killed worker, nobody retrying: nothing for purge to reclaim; the key runs as new."""
    flight = chaos.start_slow(server.port, database, key)
    assert flight.backend is not None
    server.kill_worker(flight.backend.worker)
    flight.answer()
    problems = expect(gone(database, flight.backend.pid), f"{key}: its backend lives on")
    problems += nothing_left(database, key)
    report = manage(database.url, "purge_idempotency")
    answers = [charge(server.port, key, flight.path) for _ in range(2)]
    problems += expect(answers[0].status == 201 and not answers[0].replayed, f"{key}: not new")
    problems += expect(bool(report), "purge printed nothing")
    problems += chaos.executed_once(database, key, answers)
    return Outcome("purge", key, 3, problems)


def outlive_lease(server: SampleServer, database: ScratchDatabase, key: str) -> Outcome:
    """A live request past its 2 s lease: no row to see, duplicates 409, purge finds nothing."""
    flight = chaos.start_slow(server.port, database, key, SHORT_LEASE_CHARGES)
    assert flight.backend is not None
    # Under "lock" there is no row to read the lease's end from: its transaction began
    # before its claim, so 2 s after that start, by the database's clock, the lease is over.
    (started,) = database.rows(
        "SELECT xact_start FROM pg_stat_activity WHERE pid = %s", (flight.backend.pid,)
    )[0]
    wait_for_clock(database, started + SHORT_LEASE)
    duplicate = charge(server.port, key, flight.path)
    report = manage(database.url, "purge_idempotency")
    problems = expect(flight.running, f"{key}: the slow request ended at its gate")
    problems += expect(duplicate.status == 409, f"{key}: duplicate got {duplicate.status}")
    problems += in_flight_entry(database, key, "lock")
    answers: list[Answer] = [flight.answer(), duplicate]
    answers.append(charge(server.port, key, flight.path))
    problems += expect(answers[0].status == 201, f"{key}: the slow request got {answers[0].status}")
    problems += expect(bool(report), "purge printed nothing")
    problems += chaos.executed_once(database, key, answers)
    return Outcome("outlive", key, len(answers), problems)


def nothing_left(database: ScratchDatabase, key: str) -> list[str]:
    """What a dead worker must leave under "lock": no entry, no charge."""
    problems = expect(database.charges([key])[key] == [], f"{key}: the dead worker's charge")
    entry = database.entries([key]).get(key)
    return problems + expect(entry is None, f"{key}: a claim survived the kill: {entry}")


def summary(verdict: Verdict) -> str:
    return (
        f"{verdict.requests} requests, {verdict.keys} keys: {verdict.originals} originals, "
        f"{verdict.replays} replays, {verdict.conflicts} 409s, {verdict.server_errors} 5xx, "
        f"{verdict.dropped} dropped, {verdict.duplicates_committed} duplicates"
    )


__all__ = ["in_flight_entry", "kill_mid_work", "outlive_lease", "purge_after_kill", "summary"]


Scenario = Callable[[SampleServer, ScratchDatabase, str], Outcome]

#: The targeted crash scenarios, per served protocol: the system tier runs each
#: once (``test_crashes.py``), ``make stress`` ``--targeted`` times.
TARGETED: dict[str, dict[str, Scenario]] = {
    "lock": {
        "kill": kill_mid_work,
        "terminate": chaos.terminate_mid_transaction,
        "purge": purge_after_kill,
        "outlive": outlive_lease,
    },
    "lease": {
        "kill": chaos.kill_mid_work,
        "terminate": chaos.terminate_mid_transaction,
        "purge": chaos.purge_reclaims_abandoned,
        "outlive": chaos.outlive_lease,
    },
}
