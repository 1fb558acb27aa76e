"""A worker killed mid-transaction inside a protected Strawberry mutation (sync and ``async
def``) and a Graphene one.

Served by the sample project under gunicorn (``tests.system.served_urls``'s
``/chaos/graphql/…``, ``/chaos/graphene/``), under both protocols: nothing the killed worker wrote
survives, and the key's retries run the mutation once; every answer that ran or
replayed is the same, byte for byte.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from tests.system import scenarios
from tests.system.chaos import InFlight, expect
from tests.system.harness import Answer, Gate, SampleServer, ScratchDatabase, new_keys, request

pytestmark = [pytest.mark.system, pytest.mark.requires_postgres]

STACKS = pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/chaos/graphql/", "charge"),
        ("/chaos/graphql/async/", "chargeAsync"),
        ("/chaos/graphene/", "charge"),
    ],
)


def pay(port: int, key: str, path: str, field: str, gate: int | None = None) -> Answer:
    """The mutation with ``key`` in the Idempotency-Key header (and as the description)."""
    query = (
        f"mutation($d: String!) {{ {field}(amount: 100, description: $d) {{ id description }} }}"
    )
    body = json.dumps({"query": query, "variables": {"d": key}}).encode()
    headers = {"Idempotency-Key": key, "Content-Type": "application/json"}
    if gate is not None:
        headers["X-Chaos-Gate"] = str(gate)  # waits there, after its write, until opened
    return request(port, "POST", path, body, headers)


def codes(answer: Answer) -> list[str]:
    if answer.status != 200:
        return [str(answer.status)]
    return [
        e.get("extensions", {}).get("code", "") for e in json.loads(answer.body).get("errors") or []
    ]


def retry_until_run(port: int, key: str, path: str, field: str, patience: float) -> list[Answer]:
    """Retry as a client honouring "in-progress" (and a dead connection) would."""
    answers = [pay(port, key, path, field)]
    give_up = time.monotonic() + patience
    while codes(answers[-1]) and time.monotonic() < give_up:
        assert set(codes(answers[-1])) <= {"in-progress", "0"}, codes(answers[-1])
        time.sleep(0.2)
        answers.append(pay(port, key, path, field))
    return answers


@STACKS
def test_a_killed_worker_inside_a_mutation_commits_nothing_and_the_key_runs_once(
    server: SampleServer, scratch: ScratchDatabase, protocol: str, path: str, field: str
) -> None:
    key = new_keys(1, "gql-kill")[0]  # short: application_name holds 63 bytes
    flight = InFlight(key, path, Gate(scratch).close())
    flight.thread = threading.Thread(
        target=lambda: flight.answers.append(pay(server.port, key, path, field, flight.gate.id)),
        daemon=True,
    )
    flight.thread.start()
    try:
        backend = flight.gate.waiter(key)  # the resolver is inside its transaction, at the gate
    except BaseException:
        flight.gate.open()
        raise
    assert backend is not None
    assert server.kill_worker(backend.worker)
    assert flight.answer().status == 0
    assert scenarios.gone(scratch, backend.pid)
    assert scratch.charges([key])[key] == []
    if protocol == "lock":
        assert scenarios.nothing_left(scratch, key) == []
    else:
        assert scenarios.in_flight_entry(scratch, key, "lease") == []  # abandoned, leased
    answers = retry_until_run(server.port, key, path, field, server.lease * 3 + 60)
    answers.append(pay(server.port, key, path, field))
    ran = [a for a in answers if not codes(a)]
    committed = scratch.charges([key])[key]
    problems = expect(len(committed) == 1, f"{key}: committed charges {committed}")
    problems += expect(len(ran) == 2, f"{key}: answers {[codes(a) for a in answers]}")
    problems += expect({a.body for a in ran} == {ran[0].body}, f"{key}: the replay differs")
    if committed:
        data = json.loads(ran[0].body)["data"][field]
        problems += expect(
            data["id"] == committed[0], f"{key}: answered {data}, committed {committed}"
        )
    assert problems == []
