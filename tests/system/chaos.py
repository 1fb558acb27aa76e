"""What the system tier and ``make stress`` do with the harness's tools, and how they judge it.

Storms of duplicate clients, one request caught in the middle of its business
work, the crash scenarios as the "lease" protocol must pass them
(``tests.system.scenarios`` has "lock"'s), and one judge of what came back.
Each scenario returns what broke (empty: the promise held).
"""

from __future__ import annotations

import json
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from typing import Any

from tests.system.harness import (
    CHARGES,
    MONKEY_GATE,
    SHORT_LEASE_CHARGES,
    SLOW_CHARGES,
    Answer,
    Backend,
    Gate,
    SampleServer,
    ScratchDatabase,
    TcpProxy,
    charge,
    manage,
    new_keys,
    retry_until_final,
    wait_for_clock,
)

# --- the storm ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class StormPlan:
    keys: int
    per_key: int = 8
    clients: int = 32
    # Share of clients that, answered, send again after a random delay (a lost answer).
    late_duplicates: float = 0.25
    # How long one client keeps retrying 409/5xx: a few leases, whatever the load.
    patience: float = 90
    seed: int = 0
    # Share of keys sent to the slow view, working ``work`` s after the write and passing the
    # monkey's gate (``harness.Monkey``) in between: the monkey's mark.
    slow_share: float = 0
    work: float = 0.2


def storm(port: int, plan: StormPlan, prefix: str = "storm") -> dict[str, list[Answer]]:
    """Every key sent by ``per_key`` concurrent clients; each client's answers, per key."""
    keys = new_keys(plan.keys, prefix)
    pick = random.Random(plan.seed)
    work = {key: plan.work if pick.random() < plan.slow_share else 0.0 for key in keys}
    answers: dict[str, list[Answer]] = {key: [] for key in keys}
    with ThreadPoolExecutor(plan.clients, thread_name_prefix="idem_sys-client") as pool:
        # Key-major order: a key's clients are taken by neighbouring threads, so they race.
        jobs = [
            (key, pool.submit(_client, port, key, plan, work[key], f"{plan.seed}-{key}-{n}"))
            for key in keys
            for n in range(plan.per_key)
        ]
        for key, job in jobs:
            answers[key].extend(job.result())
    return answers


def _client(port: int, key: str, plan: StormPlan, work: float, seed: str) -> list[Answer]:
    rng = random.Random(seed)
    path, gate = (SLOW_CHARGES, MONKEY_GATE) if work else (CHARGES, None)
    answers = retry_until_final(port, key, plan.patience, rng, path, work, gate)
    if answers[-1].status == 201 and rng.random() < plan.late_duplicates:
        time.sleep(rng.uniform(0, 0.5))  # traffic's shape (a lost answer), not a synchronisation
        answers += retry_until_final(port, key, plan.patience, rng, path, work, gate)
    return answers


# --- one request in the middle of its business work --------------------------------------------


@dataclass
class InFlight:
    """A request whose charge is written but not committed, held at its gate until answered."""

    key: str
    path: str
    gate: Gate
    answers: list[Answer] = field(default_factory=list)
    thread: threading.Thread | None = None
    backend: Backend | None = None

    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def answer(self, within: float = 300) -> Answer:
        """Open its gate and wait for its answer (``within`` only bounds a broken run)."""
        self.gate.open()
        assert self.thread is not None
        self.thread.join(within)
        assert not self.thread.is_alive(), f"request {self.key} still running after {within}s"
        return self.answers[0]


def start_slow(
    port: int, database: ScratchDatabase, key: str, path: str = SLOW_CHARGES
) -> InFlight:
    """Send a request; return once it waits at its gate, inside its view, after its write.

    It stays there, mid-transaction, until ``InFlight.answer()`` opens the gate.
    """
    flight = InFlight(key, path, Gate(database).close())

    def send() -> None:
        flight.answers.append(charge(port, key, path, gate=flight.gate.id))

    flight.thread = threading.Thread(target=send, name=f"idem_sys-slow-{key}", daemon=True)
    flight.thread.start()
    try:
        flight.backend = flight.gate.waiter(key)
    except BaseException:
        flight.gate.open()
        raise
    return flight


def lease_end(database: ScratchDatabase, key: str) -> float:
    """When the key's claim stops being trusted, as a Unix time (the server's clock is ours)."""
    _, locked_until = database.entries([key])[key]
    return float(locked_until.timestamp())


def wait_for_lease(database: ScratchDatabase, key: str) -> None:
    """Until the database's clock has passed the key's ``locked_until``."""
    _, locked_until = database.entries([key])[key]
    wait_for_clock(database, locked_until)


# --- the scenarios: each returns what broke (empty: the promise held) ---------------------------


@dataclass
class Outcome:
    scenario: str
    key: str
    requests: int
    problems: list[str]
    keys: int = 1


def expect(ok: bool, problem: str) -> list[str]:
    return [] if ok else [problem]


def kill_mid_work(
    server: SampleServer, database: ScratchDatabase, key: str, path: str = SLOW_CHARGES
) -> Outcome:
    """SIGKILL the worker between the charge's INSERT and COMMIT; the lease, then one retry runs."""
    flight = start_slow(server.port, database, key, path)
    assert flight.backend is not None
    killed = server.kill_worker(flight.backend.worker)
    answer = flight.answer()
    problems = expect(killed, f"{key}: worker {flight.backend.worker} is not one of ours")
    problems += expect(answer.status == 0, f"{key}: the killed worker answered {answer.status}")
    problems += abandoned(database, key)
    if problems:
        return Outcome("kill", key, 1, problems)
    ends = lease_end(database, key)
    answers = retry_until_final(
        server.port, key, server.lease * 3 + 60, random.Random(key), flight.path
    )
    answers.append(charge(server.port, key, flight.path))
    problems = conflicts_until(answers, ends) + executed_once(database, key, answers)
    return Outcome("kill", key, 1 + len(answers), problems)


def terminate_mid_transaction(server: SampleServer, database: ScratchDatabase, key: str) -> Outcome:
    """pg_terminate_backend between the charge's INSERT and COMMIT: a 5xx, then one retry runs."""
    flight = start_slow(server.port, database, key)
    assert flight.backend is not None
    terminated = database.terminate(flight.backend)
    answer = flight.answer()
    problems = expect(terminated, f"{key}: backend {flight.backend.pid} not terminated")
    problems += expect(500 <= answer.status < 600, f"{key}: answered {answer.status}, not a 5xx")
    problems += expect(database.charges([key])[key] == [], f"{key}: the charge committed")
    answers = retry_until_final(
        server.port, key, server.lease * 3 + 60, random.Random(key), flight.path
    )
    answers.append(charge(server.port, key, flight.path))
    problems += executed_once(database, key, answers)
    return Outcome("terminate", key, 1 + len(answers), problems)


def purge_reclaims_abandoned(server: SampleServer, database: ScratchDatabase, key: str) -> Outcome:
    """A killed worker's claim, nobody retrying: once its lease passes, purge deletes it."""
    flight = start_slow(server.port, database, key)
    assert flight.backend is not None
    server.kill_worker(flight.backend.worker)
    flight.answer()
    problems = abandoned(database, key)
    wait_for_lease(database, key)
    report = manage(database.url, "purge_idempotency")
    problems += expect(key not in database.entries([key]), f"{key}: purge kept it: {report!r}")
    problems += expect(database.charges([key])[key] == [], f"{key}: a charge appeared")
    answers = [charge(server.port, key, flight.path), charge(server.port, key, flight.path)]
    problems += expect(answers[0].status == 201 and not answers[0].replayed, f"{key}: not new")
    problems += executed_once(database, key, answers)
    return Outcome("purge", key, 3, problems)


def outlive_lease(server: SampleServer, database: ScratchDatabase, key: str) -> Outcome:
    """A live request past its 2 s lease: duplicates get 409 and purge leaves it alone."""
    flight = start_slow(server.port, database, key, SHORT_LEASE_CHARGES)
    wait_for_lease(database, key)
    duplicate = charge(server.port, key, flight.path)
    report = manage(database.url, "purge_idempotency")
    entry = database.entries([key]).get(key)
    # Held at its gate, it still runs, whatever the machine's speed.
    problems = expect(flight.running, f"{key}: the slow request ended at its gate")
    problems += expect(duplicate.status == 409, f"{key}: duplicate got {duplicate.status}")
    problems += expect(entry is not None, f"{key}: purge took a live claim: {report!r}")
    answers = [flight.answer(), duplicate, charge(server.port, key, flight.path)]
    problems += expect(answers[0].status == 201, f"{key}: the slow request got {answers[0].status}")
    problems += executed_once(database, key, answers)
    return Outcome("outlive", key, len(answers), problems)


def database_outage(
    server: SampleServer, proxy: TcpProxy, database: ScratchDatabase, keys: list[str]
) -> Outcome:
    """The entries' database cut away: 503 problem+json, nothing ran; back: each key runs once."""
    proxy.cut()
    try:
        during = {key: charge(server.port, key) for key in keys}
    finally:
        proxy.restore()
    problems = [
        f"{key}: {a.status} {a.headers.get('content-type')} {a.body[:100]!r}"
        for key, a in during.items()
        if not (a.status == 503 and a.problem and a.headers.get("retry-after"))
    ]
    problems += expect(not any(database.charges(keys).values()), "charged during the outage")
    problems += expect(not database.entries(keys), "entries stored during the outage")
    rng = random.Random(keys[0])
    after = {key: retry_until_final(server.port, key, 60, rng) for key in keys}
    problems += judge(after, database).broken()
    requests = len(keys) + sum(map(len, after.values()))
    return Outcome("outage", keys[0], requests, problems, keys=len(keys))


def abandoned(database: ScratchDatabase, key: str) -> list[str]:
    """What a dead worker must leave: its claim in progress, its charge rolled back."""
    entry = database.entries([key]).get(key)
    problems = expect(
        database.charges([key])[key] == [], f"{key}: the dead worker's charge committed"
    )
    return problems + expect(
        entry is not None and entry[0] == "in_progress", f"{key}: claim after the kill: {entry}"
    )


def conflicts_until(answers: list[Answer], lease_ends: float) -> list[str]:
    """Every answer that arrived before the lease ended is a 409 with Retry-After."""
    early = [a for a in answers if a.received < lease_ends]
    return [
        f"before the lease ended: {a.status} {a.body[:100]!r}"
        for a in early
        if not (a.status == 409 and a.headers.get("retry-after"))
    ]


def executed_once(database: ScratchDatabase, key: str, answers: list[Answer]) -> list[str]:
    """One committed charge; one original 201 among ``answers``, the rest byte-identical replays."""
    successes = [a for a in answers if a.status == 201]
    charge_ids = database.charges([key])[key]
    originals = [a for a in successes if not a.replayed]
    problems = expect(len(charge_ids) == 1, f"{key}: committed charges {charge_ids}")
    problems += expect(
        len(originals) == 1, f"{key}: {len(originals)} originals in {statuses(answers)}"
    )
    problems += expect(
        answers[-1].replayed, f"{key}: last answer not a replay: {statuses(answers)}"
    )
    if successes and len(charge_ids) == 1:
        problems += [f"{key}: replay differs" for a in successes if a.body != successes[0].body]
        answered = json.loads(successes[0].body).get("id")
        problems += expect(
            answered == charge_ids[0], f"{key}: answered {answered}, committed {charge_ids}"
        )
    return problems


def statuses(answers: list[Answer]) -> list[str]:
    return [f"{a.status}{'r' if a.replayed else ''}" for a in answers]


# --- the judge ---------------------------------------------------------------------------------


@dataclass
class Verdict:
    """What a storm produced, counted; the promise holds when ``broken()`` is empty."""

    requests: int = 0
    keys: int = 0
    originals: int = 0
    replays: int = 0
    conflicts: int = 0
    server_errors: int = 0
    dropped: int = 0
    duplicates_committed: int = 0
    unexpected: list[str] = field(default_factory=list)
    inconsistent: list[str] = field(default_factory=list)
    unfinished: list[str] = field(default_factory=list)

    def add(self, other: Verdict) -> None:
        """Fold ``other`` in: counts add up, lists concatenate."""
        for item in fields(self):
            setattr(self, item.name, getattr(self, item.name) + getattr(other, item.name))

    def broken(self) -> list[str]:
        return [
            *(f"unexpected: {u}" for u in self.unexpected[:20]),
            *(f"inconsistent: {i}" for i in self.inconsistent[:20]),
            *(f"unfinished: {u}" for u in self.unfinished[:20]),
            *(
                [f"{self.duplicates_committed} duplicates committed"]
                * bool(self.duplicates_committed)
            ),
        ]


def judge(
    answers: dict[str, list[Answer]],
    database: ScratchDatabase,
    chaos: bool = False,
) -> Verdict:
    """Hold every answer and the tables to SPEC; ``chaos`` admits 5xx and dropped connections."""
    keys = list(answers)
    charges, entries = database.charges(keys), database.entries(keys)
    verdict = Verdict(keys=len(keys))
    for key in keys:
        _judge_key(verdict, key, answers[key], charges[key], entries.get(key), chaos)
    return verdict


def _judge_key(
    verdict: Verdict,
    key: str,
    answers: list[Answer],
    charge_ids: list[int],
    entry: tuple[str, Any] | None,
    chaos: bool,
) -> None:
    verdict.requests += len(answers)
    verdict.duplicates_committed += max(0, len(charge_ids) - 1)
    for answer in answers:
        _count(verdict, key, answer, chaos)
    successes = [a for a in answers if a.status == 201]
    if not successes or len(charge_ids) != 1 or entry is None or entry[0] != "completed":
        verdict.unfinished.append(f"{key}: {len(successes)} 201s, charges {charge_ids}, {entry}")
        return
    _judge_successes(verdict, key, successes, charge_ids[0], chaos)


def _count(verdict: Verdict, key: str, answer: Answer, chaos: bool) -> None:
    if answer.status == 201:
        verdict.replays += answer.replayed
        verdict.originals += not answer.replayed
    elif answer.status == 409 and answer.problem and answer.headers.get("retry-after"):
        verdict.conflicts += 1
    elif chaos and answer.status in (500, 503) and (answer.status == 500 or answer.problem):
        verdict.server_errors += 1
    elif chaos and answer.status == 0:
        verdict.dropped += 1
    else:
        detail = answer.error or answer.body[:200].decode("utf-8", "replace")
        verdict.unexpected.append(f"{key}: {answer.status} {detail}")


def _judge_successes(
    verdict: Verdict, key: str, successes: list[Answer], charge_id: int, chaos: bool
) -> None:
    first = successes[0]
    originals = sum(not a.replayed for a in successes)
    # A worker killed after its commit never sent its original: chaos may see none.
    if originals > 1 or (originals == 0 and not chaos):
        verdict.inconsistent.append(f"{key}: {originals} original answers")
    for answer in successes:
        same = (answer.body, answer.headers.get("location")) == (
            first.body,
            first.headers.get("location"),
        )
        if not same:
            verdict.inconsistent.append(f"{key}: replay differs: {answer.body!r} vs {first.body!r}")
    if json.loads(first.body).get("id") != charge_id:
        verdict.inconsistent.append(f"{key}: answered {first.body!r}, committed charge {charge_id}")
