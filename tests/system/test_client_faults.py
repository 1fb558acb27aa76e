"""The Python client against the sample under gunicorn, through a proxy that loses answers.

Each scenario runs on httpx (sync and async) and requests. Waits are recorded,
never slept: the policy's ``sleep`` and ``clock`` are the test's (a wait that
must outlast a request in flight waits on the proxy's event instead). PostgreSQL
only, like the whole system tier; the lock protocol's server (the default).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests

from idempotency_django.client import (
    AsyncIdempotentTransport,
    IdempotentAdapter,
    IdempotentTransport,
    RetriesExhausted,
    RetryPolicy,
)
from tests.http_fault_proxy import Answer, FaultProxy
from tests.system.harness import SLOW_CHARGES, SampleServer, ScratchDatabase, manage

pytestmark = [pytest.mark.system, pytest.mark.requires_postgres]

LIBRARIES = ["httpx", "httpx-async", "requests"]


@pytest.fixture(scope="module")
def served(scratch: ScratchDatabase, logs: Path) -> Iterator[SampleServer]:
    with SampleServer(scratch.url, logs / "server-client.log", workers=2, lease=8) as server:
        yield server


@pytest.fixture
def proxy(served: SampleServer) -> Iterator[FaultProxy]:
    proxy = FaultProxy(served.port)
    yield proxy
    proxy.close()


@dataclass
class Clock:
    """The policy's sleep and clock: a sleep advances the clock and is recorded."""

    sleeps: list[float] = field(default_factory=list)
    now: float = 0.0

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    async def async_sleep(self, seconds: float) -> None:
        self.sleep(seconds)

    def policy(self, **options: Any) -> RetryPolicy:
        return RetryPolicy(
            sleep=self.sleep, async_sleep=self.async_sleep, clock=lambda: self.now, **options
        )


@dataclass(frozen=True)
class Reply:
    status: int
    body: Any
    replayed: bool
    key: str


def post(library: str, port: int, policy: RetryPolicy, body: dict[str, Any], **kw: Any) -> Reply:
    """POST ``body`` through ``library`` with an idempotent transport; the reply and its key."""
    url = f"http://127.0.0.1:{port}{kw.pop('path', '/charges/')}"
    headers = kw.pop("headers", {})
    if library == "requests":
        with requests.Session() as session:
            session.mount("http://", IdempotentAdapter(policy=policy))
            got = session.post(url, json=body, headers=headers, timeout=60)
            key = got.request.headers["Idempotency-Key"]
            return Reply(got.status_code, got.json(), _replayed(got.headers), str(key))
    if library == "httpx":
        with httpx.Client(transport=IdempotentTransport(policy=policy), timeout=60) as client:
            return _reply(client.post(url, json=body, headers=headers))

    async def send() -> Reply:
        transport = AsyncIdempotentTransport(policy=policy)
        async with httpx.AsyncClient(transport=transport, timeout=60) as client:
            return _reply(await client.post(url, json=body, headers=headers))

    return asyncio.run(send())


def _reply(got: httpx.Response) -> Reply:
    key = got.extensions["idempotency_key"]
    assert got.request.headers["Idempotency-Key"] == key
    return Reply(got.status_code, got.json(), _replayed(got.headers), key)


def _replayed(headers: Any) -> bool:
    return bool(headers.get("Idempotent-Replayed") == "true")


def charge(description: str) -> dict[str, Any]:
    return {"amount": 100, "currency": "eur", "description": description}


def new_description() -> str:
    return f"client-{uuid.uuid4()}"


@pytest.mark.parametrize("library", LIBRARIES)
def test_an_answer_lost_after_the_commit_is_replayed_once_committed(
    library: str, proxy: FaultProxy, scratch: ScratchDatabase
) -> None:
    clock, description = Clock(), new_description()
    proxy.script("drop", "drop")

    reply = post(library, proxy.port, clock.policy(), charge(description))

    assert reply.status == 201
    assert reply.replayed
    assert proxy.keys() == [reply.key] * 3
    assert uuid.UUID(reply.key).version == 7
    assert scratch.charges([description])[description] == [reply.body["id"]]
    assert len(clock.sleeps) == 2


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_409_storm_is_waited_out_as_retry_after_says_up_to_the_cap(
    library: str, proxy: FaultProxy, scratch: ScratchDatabase
) -> None:
    clock, description = Clock(), new_description()
    busy = Answer(409, {"Retry-After": "2"})
    proxy.script(busy, busy, Answer(409, {"Retry-After": "3600"}), busy)

    reply = post(library, proxy.port, clock.policy(max_retry_after=10), charge(description))

    assert (reply.status, reply.replayed) == (201, False)
    assert clock.sleeps == [2, 2, 10, 2]
    assert proxy.keys() == [reply.key] * 5
    assert scratch.charges([description])[description] == [reply.body["id"]]


@pytest.mark.parametrize("library", LIBRARIES)
def test_503s_are_retried_with_jittered_backoff_and_the_same_key(
    library: str, proxy: FaultProxy, scratch: ScratchDatabase
) -> None:
    clock, description = Clock(), new_description()
    proxy.script(Answer(503), Answer(503), Answer(502))

    reply = post(library, proxy.port, clock.policy(backoff=1), charge(description))

    assert reply.status == 201
    assert len(set(proxy.keys())) == 1
    assert all(0 <= wait <= step for wait, step in zip(clock.sleeps, [1, 2, 4], strict=True))
    assert scratch.charges([description])[description] == [reply.body["id"]]


@pytest.mark.parametrize("library", LIBRARIES)
def test_it_gives_up_with_the_key_after_its_attempts(
    library: str, proxy: FaultProxy, scratch: ScratchDatabase
) -> None:
    clock, description = Clock(), new_description()
    proxy.script(*[Answer(503)] * 3)

    with pytest.raises(RetriesExhausted) as raised:
        post(library, proxy.port, clock.policy(max_attempts=3), charge(description))

    assert (raised.value.attempts, raised.value.status) == (3, 503)
    assert proxy.keys() == [raised.value.key] * 3
    assert raised.value.key in str(raised.value)
    assert scratch.charges([description])[description] == []


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_422_is_never_retried(library: str, proxy: FaultProxy) -> None:
    clock, key = Clock(), str(uuid.uuid4())
    first = post(
        library, proxy.port, clock.policy(), charge("one"), headers={"Idempotency-Key": key}
    )
    proxy.script()

    other = post(
        library, proxy.port, clock.policy(), charge("two"), headers={"Idempotency-Key": key}
    )

    assert (first.status, first.key) == (201, key)
    assert (other.status, other.key) == (422, key)
    assert proxy.keys() == [key]
    assert clock.sleeps == []


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_retry_while_the_first_attempt_is_in_flight_waits_for_its_answer(
    library: str, proxy: FaultProxy, scratch: ScratchDatabase
) -> None:
    """A real 409: the first attempt is inside its view when its connection is cut."""
    description = new_description()
    body = json.dumps(charge(description)).encode()

    def inside_the_view() -> None:
        for _ in range(600):
            key = proxy.seen[0].key  # the first attempt's, seen before hold() is called
            if any(b.key == key for b in scratch.backends(in_transaction=True)):
                return
            proxy.answered.wait(0.05)
        raise AssertionError("the first attempt never reached its view")

    waits = Clock()

    def wait_for_the_first(seconds: float) -> None:
        waits.sleep(seconds)
        if len(waits.sleeps) > 1:  # after the 409, not after the lost answer
            proxy.answered.wait(60)

    async def async_wait(seconds: float) -> None:
        await asyncio.to_thread(wait_for_the_first, seconds)

    policy = RetryPolicy(sleep=wait_for_the_first, async_sleep=async_wait, clock=lambda: 0.0)
    proxy.hold = inside_the_view
    proxy.script("drop_early")

    reply = post(
        library,
        proxy.port,
        policy,
        json.loads(body),
        path=SLOW_CHARGES,
        headers={"X-Chaos-Delay": "1"},
    )

    assert (reply.status, reply.replayed) == (201, True)
    assert scratch.charges([description])[description] == [reply.body["id"]]
    assert [seen.fault for seen in proxy.seen][:2] == ["drop_early", "forward"]
    assert len(set(proxy.keys())) == 1
    assert len(waits.sleeps) >= 2  # after the lost answer, then after the 409


def test_the_samples_command_pays_once_through_its_flaky_proxy(
    served: SampleServer, scratch: ScratchDatabase
) -> None:
    out = manage(scratch.url, "pay_through_flaky_proxy", "--url", f"http://127.0.0.1:{served.port}")
    assert "attempts: 2" in out
    assert "replayed: True" in out
    assert "charges:  1" in out
    with pytest.raises(
        RuntimeError,
        match=r"(?s)CommandError: gave up after 3 attempt.*Send it again with this key",
    ):
        manage(
            scratch.url,
            "pay_through_flaky_proxy",
            "--url",
            f"http://127.0.0.1:{served.port}",
            "--lose",
            "3",
        )
