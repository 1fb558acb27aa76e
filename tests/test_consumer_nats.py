"""The NATS JetStream preset (``idempotency_django.consumers.nats``) against a real server.

A consumer process commits its write and is SIGKILLed before the ack: the
redelivery replays (one effect). PostgreSQL cut away mid-stream (through a proxy,
the shared server keeps running): every event is retried, none is given up on,
and after the restore each is processed exactly once. A poison message is tried
``POLICY.max_attempts`` times, published to the dead-letter subject, terminated,
and its key left free.
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

from idempotency_django.consumers.models import ConsumerFailure
from idempotency_django.models import IdempotencyEntry
from tests import consumer_harness as harness
from tests.broker_proxy import CuttableProxy
from tests.celery_harness import database_url
from tests.conftest import reachable, service_missing
from tests.testapp.models import Charge

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
        headers = {"Nats-Msg-Id": f"{event['id']}-{event.get('version', 1)}"}
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


def consumer(traces: Path, stream: Stream, database: str = "") -> Any:
    return harness.consumer(
        traces,
        "tests.consumer_nats",
        list(stream),
        database or database_url(),
        NATS_URL=NATS_URL,
    )


def drained(stream: Stream) -> bool:
    return bool(run(_pending(stream[0])) == (0, 0))


def test_killed_after_the_commit_and_before_the_ack_the_redelivery_replays_once(
    tmp_path: Path, stream: Stream
) -> None:
    (tmp_path / "hold-e1").touch()
    run(_publish(stream[1], {"id": "e1", "amount": 10}))
    with consumer(tmp_path, stream) as first:
        harness.wait_for(
            lambda: harness.steps(tmp_path, "committed", "e1") == 1, "the commit", tmp_path
        )
        harness.kill(first)
    (tmp_path / "hold-e1").unlink()
    assert Charge.objects.filter(reference="e1").count() == 1
    assert harness.steps(tmp_path, "ack", "e1") == 0
    with consumer(tmp_path, stream):
        harness.wait_for(lambda: harness.steps(tmp_path, "ack", "e1") == 1, "the ack", tmp_path)
        harness.wait_for(lambda: drained(stream), "nothing left pending", tmp_path)
    assert harness.steps(tmp_path, "replayed", "e1") == 1
    assert harness.steps(tmp_path, "ran", "e1") == 1
    assert Charge.objects.filter(reference="e1").count() == 1


def test_a_database_outage_mid_stream_loses_nothing(tmp_path: Path, stream: Stream) -> None:
    before = [{"id": f"b{n}", "amount": n} for n in range(3)]
    during = [{"id": f"d{n}", "amount": n} for n in range(5)]
    proxy = CuttableProxy(int(urlsplit(database_url()).port or 5432))
    try:
        run(_publish(stream[1], *before))
        with consumer(tmp_path, stream, harness.via_port(database_url(), proxy.port)):
            harness.wait_for(
                lambda: harness.count(tmp_path, "ack") == 3, "the first acks", tmp_path
            )
            proxy.cut()
            run(_publish(stream[1], *during))
            # The consumer meets the outage on several events before the database is back.
            harness.wait_for(
                lambda: harness.count(tmp_path, "unavailable") >= 5,
                "retries in the outage",
                tmp_path,
            )
            proxy.restore()
            harness.wait_for(lambda: harness.count(tmp_path, "ack") == 8, "every ack", tmp_path)
            harness.wait_for(lambda: drained(stream), "nothing left pending", tmp_path)
    finally:
        proxy.close()
    assert harness.count(tmp_path, "dead_letter") == 0
    for event in before + during:
        assert Charge.objects.filter(reference=event["id"]).count() == 1, event
        assert harness.steps(tmp_path, "committed", str(event["id"])) == 1, event
    assert run(_dead_letters(stream[0])) == []


def test_a_poison_message_is_dead_lettered_and_leaves_its_key_free(
    tmp_path: Path, stream: Stream
) -> None:
    run(_publish(stream[1], {"id": "p1", "amount": "poison"}, {"id": "e2", "amount": 5}))
    with consumer(tmp_path, stream):
        harness.wait_for(
            lambda: harness.steps(tmp_path, "dead_letter", "p1") == 1, "the dead letter", tmp_path
        )
        harness.wait_for(
            lambda: harness.steps(tmp_path, "ack", "e2") == 1, "the next event", tmp_path
        )
        assert harness.steps(tmp_path, "ran", "p1") == harness.POLICY.max_attempts
        assert not IdempotencyEntry.objects.filter(key__endswith="\x1fp1").exists()
        assert not ConsumerFailure.objects.filter(key__endswith="\x1fp1").exists()
        assert run(_dead_letters(stream[0])) == ["p1"]
        # The producer fixes the event and sends it again: the same event id runs once.
        run(_publish(stream[1], {"id": "p1", "amount": 7, "version": 2}))
        harness.wait_for(
            lambda: harness.steps(tmp_path, "ack", "p1") == 1, "the fixed event", tmp_path
        )
        harness.wait_for(lambda: drained(stream), "nothing left pending", tmp_path)
    assert Charge.objects.filter(reference="p1").count() == 1
