"""The NATS JetStream preset's real server (``idempotency_django.consumers.nats``): a
stream, subject and durable consumer of each test's own, and the scenarios' view of them
(:class:`JetStream`). tests/test_consumer_contract.py runs every scenario over it.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests import consumer_harness as harness
from tests.conftest import reachable, service_missing

NATS_URL = os.environ.get("NATS_URL", "nats://127.0.0.1:4222")
#: Streams are named PREFIX_<random>: suites sharing one server never meet.
PREFIX = os.environ.get("IDEMPOTENCY_TEST_NATS_PREFIX", "idem_consumer")
pytestmark = [
    pytest.mark.requires_postgres,
    pytest.mark.system,
    pytest.mark.django_db(transaction=True),
]
Stream = tuple[str, str, str]


@pytest.fixture
def stream() -> Iterator[Stream]:
    """A stream, subject and durable consumer of this test's own (and a dead-letter stream)."""
    pytest.importorskip("nats")
    parts = urlsplit(NATS_URL)
    if not reachable(parts.hostname or "127.0.0.1", parts.port or 4222):
        service_missing(f"NATS JetStream at {NATS_URL} is unreachable")
    name = f"{PREFIX}_{uuid.uuid4().hex[:10]}"
    run(_create(name))
    try:
        yield name, f"{name}.events", f"{name}_durable"
    finally:
        run(_delete(name))


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


async def _connect() -> Any:
    import nats

    return await nats.connect(NATS_URL)


async def _create(name: str) -> None:
    from nats.js.api import AckPolicy, ConsumerConfig

    connection = await _connect()
    js = connection.jetstream()
    await js.add_stream(name=name, subjects=[f"{name}.events"])
    await js.add_stream(name=f"{name}_dead", subjects=[f"{name}_dead.events"])
    # Redelivered 2 s after a delivery nobody acked: the window the killed consumer
    # leaves. No max_deliver: outages and busy keys are redelivered too, uncounted.
    await js.add_consumer(
        name,
        ConsumerConfig(durable_name=f"{name}_durable", ack_policy=AckPolicy.EXPLICIT, ack_wait=2),
    )
    await connection.close()


async def _delete(name: str) -> None:
    connection = await _connect()
    await connection.jetstream().delete_stream(name)
    await connection.jetstream().delete_stream(f"{name}_dead")
    await connection.close()


async def _publish(subject: str, *events: dict[str, Any]) -> None:
    connection = await _connect()
    for event in events:
        headers = {"Nats-Msg-Id": harness.wire_id(event)}
        await connection.jetstream().publish(subject, json.dumps(event).encode(), headers=headers)
    await connection.close()


async def _pending(name: str) -> tuple[int, int]:
    connection = await _connect()
    info = await connection.jetstream().consumer_info(name, f"{name}_durable")
    await connection.close()
    return info.num_pending, info.num_ack_pending


async def _dead_letters(name: str) -> list[str]:
    connection = await _connect()
    info = await connection.jetstream().stream_info(f"{name}_dead")
    found = []
    for seq in range(1, info.state.messages + 1):
        msg = await connection.jetstream().get_msg(f"{name}_dead", seq)
        found.append(json.loads(msg.data)["id"])
    await connection.close()
    return found


class JetStream:
    """The scenarios' view of this test's stream (tests/consumer_harness.Broker)."""

    def __init__(self, stream: Stream) -> None:
        self.stream = stream

    def publish(self, *events: dict[str, Any]) -> None:
        run(_publish(self.stream[1], *events))

    def drained(self) -> bool:
        return bool(run(_pending(self.stream[0])) == (0, 0))

    def dead_letters(self) -> list[str]:
        found: list[str] = run(_dead_letters(self.stream[0]))
        return found

    def consumer(self, traces: Path, database: str) -> Any:
        args = list(self.stream)
        return harness.consumer(traces, "tests.consumer_nats", args, database, NATS_URL=NATS_URL)
