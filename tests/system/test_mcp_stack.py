"""An idempotent MCP tool (``idempotency_django.mcp``) served by a real server.

The sample project under gunicorn serves ``tests.system.served_urls``'s ``/chaos/mcp``:
django-mcp-server's own view, spoken to as an agent's client does (JSON-RPC over
HTTP: ``initialize``, then ``tools/call`` in that session), each caller with a DRF
token. Under both protocols: a call retried with its key replays the first result
and runs once (the key with other arguments is refused), two users with one key each
run theirs, a call whose key is running (held at its gate, after its write) is refused
"in-progress", and a worker SIGKILLed there commits nothing, and the key's retries run
the tool once.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from tests.system import scenarios
from tests.system.chaos import InFlight, expect, wait_for_lease
from tests.system.harness import Answer, Gate, SampleServer, ScratchDatabase, manage, new_keys
from tests.system.harness import request as http_request

pytestmark = [pytest.mark.system, pytest.mark.requires_postgres]

ENDPOINT = "/chaos/mcp"
SCOPE = "mcp:ChaosTools.charge"  # the tool's key namespace: the entry is SCOPE \x1f key
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
FAILED = "Error executing tool charge: "  # FastMCP's words before the tool's exception
USERS = ("mcp-alice", "mcp-bob")
MAKE_USERS = """
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token
for name in {names!r}:
    user, _ = get_user_model().objects.get_or_create(username=name)
    print("token", name, Token.objects.get_or_create(user=user)[0].key)
"""


@pytest.fixture(scope="module")
def tokens(scratch: ScratchDatabase) -> dict[str, str]:
    """A DRF token per user, made in the scratch database."""
    out = manage(scratch.url, "shell", "-c", MAKE_USERS.format(names=USERS))
    found = (line.split() for line in out.splitlines() if line.startswith("token "))
    return {name: token for _, name, token in found}


class Agent:
    """An MCP client over HTTP: one session (``initialize``), then tool calls in it."""

    def __init__(self, port: int, token: str) -> None:
        self.port = port
        self.headers = {**HEADERS, "Authorization": f"Token {token}"}
        self.ids = 0
        hello = self.send(
            "initialize",
            {
                "protocolVersion": "2025-03-26",
                "capabilities": {},
                "clientInfo": {"name": "idem_sys", "version": "1"},
            },
        )
        assert hello.status == 200, hello
        self.headers["Mcp-Session-Id"] = hello.headers["mcp-session-id"]
        assert self.send("notifications/initialized", None, notify=True).status in (200, 202)

    def send(
        self,
        method: str,
        params: dict[str, Any] | None,
        notify: bool = False,
        extra: dict[str, str] | None = None,
    ) -> Answer:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        if not notify:
            self.ids += 1
            message["id"] = self.ids
        body = json.dumps(message).encode()
        return http_request(self.port, "POST", ENDPOINT, body, {**self.headers, **(extra or {})})

    def charge(self, key: str, amount: int = 100, gate: int | None = None) -> Answer:
        """``tools/call`` of the charge tool, ``key`` as its idempotency_key and description."""
        arguments = {"amount": amount, "description": key, "idempotency_key": key}
        extra = {"X-Chaos-Gate": str(gate)} if gate is not None else None
        return self.send("tools/call", {"name": "charge", "arguments": arguments}, extra=extra)


def result(answer: Answer) -> tuple[bool, str]:
    """(isError, its text) of a tool call's answer; (True, status) when it is no answer."""
    if answer.status != 200:
        return True, f"HTTP {answer.status} {answer.error}"
    found = json.loads(answer.body)["result"]
    failed = bool(found.get("isError"))
    text: str = found["content"][0]["text"]
    return failed, text.removeprefix(FAILED) if failed else text


def ran(answer: Answer) -> dict[str, Any]:
    failed, text = result(answer)
    assert not failed, text
    found: dict[str, Any] = json.loads(text)
    return found


def entry(database: ScratchDatabase, key: str) -> tuple[str, Any] | None:
    return database.entries([f"{SCOPE}\x1f{key}"]).get(f"{SCOPE}\x1f{key}")


def test_a_tool_call_retried_with_its_key_replays_and_two_users_are_kept_apart(
    server: SampleServer, scratch: ScratchDatabase, tokens: dict[str, str]
) -> None:
    alice, bob = (Agent(server.port, tokens[name]) for name in USERS)
    key = new_keys(1, "mcp")[0]
    first = ran(alice.charge(key))
    again = ran(Agent(server.port, tokens[USERS[0]]).charge(key))  # a new session, same user
    assert again == first
    assert first["caller"] == "mcp-alice"
    failed, text = result(alice.charge(key, amount=200))
    assert (failed, text.split(":")[0]) == (True, "key-reused"), text
    other = ran(bob.charge(key))
    assert other["caller"] == "mcp-bob"
    assert other["id"] != first["id"]
    assert sorted(scratch.charges([key])[key]) == sorted([first["id"], other["id"]])


def test_a_killed_worker_inside_a_tool_call_commits_nothing_and_the_key_runs_once(
    server: SampleServer, scratch: ScratchDatabase, protocol: str, tokens: dict[str, str]
) -> None:
    agent = Agent(server.port, tokens[USERS[0]])
    key = new_keys(1, "mcp-kill")[0]  # short: application_name holds 63 bytes
    flight = InFlight(key, ENDPOINT, Gate(scratch).close())
    flight.thread = threading.Thread(
        target=lambda: flight.answers.append(agent.charge(key, gate=flight.gate.id)), daemon=True
    )
    flight.thread.start()
    try:
        backend = flight.gate.waiter(key)  # the tool is inside its transaction, at the gate
    except BaseException:
        flight.gate.open()
        raise
    assert backend is not None
    # Another session's call with the key while the first holds it at the gate: refused.
    refused, why = result(Agent(server.port, tokens[USERS[0]]).charge(key))
    assert refused, why
    assert why.startswith("in-progress: "), why
    assert server.kill_worker(backend.worker)
    assert flight.answer().status == 0
    assert scenarios.gone(scratch, backend.pid)
    assert scratch.charges([key])[key] == []
    left = entry(scratch, key)
    if protocol == "lock":
        assert left is None  # the claim died with the transaction
    else:
        assert left is not None  # abandoned, leased
        assert left[0] == "in_progress"
    answers = [agent.charge(key)]  # under "lock" the first retry runs: nothing held the key
    refused, why = result(answers[0])
    if protocol == "lease" and refused:  # the dead call's claim holds the key until its lease ends
        assert why.startswith("in-progress: "), why
        wait_for_lease(scratch, f"{SCOPE}\x1f{key}")
        answers.append(agent.charge(key))
    answers.append(agent.charge(key))
    committed = scratch.charges([key])[key]
    bodies = [ran(a) for a in answers[-2:]]
    problems = expect(len(committed) == 1, f"{key}: committed charges {committed}")
    problems += expect(bodies[0] == bodies[1], f"{key}: the replay differs: {bodies}")
    problems += expect(bodies[0]["id"] in committed, f"{key}: answered {bodies[0]}")
    assert problems == []
