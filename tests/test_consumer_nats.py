"""The consumer recipe (docs/consumers.rst) against a real NATS JetStream at ``$NATS_URL``.

A consumer commits its write and is SIGKILLed before the ack; JetStream redelivers
after ``ack_wait``; the redelivery replays (one effect) and is acked. A poison
message is tried ``MAX_DELIVER`` times, then terminated, its key left free.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from idempotency_django.models import IdempotencyEntry
from tests.celery_harness import PATIENCE, ROOT, database_url
from tests.conftest import reachable, service_missing
from tests.consumer_nats import MAX_DELIVER
from tests.testapp.models import Charge

NATS_URL = os.environ.get("NATS_URL", "nats://127.0.0.1:4222")
#: Streams are named PREFIX_<random>: suites sharing one server never meet.
PREFIX = os.environ.get("IDEMPOTENCY_TEST_NATS_PREFIX", "idem_consumer")
pytestmark = [
    pytest.mark.requires_postgres,
    pytest.mark.system,
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture
def stream() -> Iterator[tuple[str, str, str]]:
    """A stream, subject and durable consumer of this test's own, deleted after it."""
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
    # Redelivered 2 s after a delivery nobody acked: the window the killed consumer leaves.
    await js.add_consumer(
        name,
        ConsumerConfig(
            durable_name=f"{name}_durable",
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=2,
            max_deliver=MAX_DELIVER + 2,  # the consumer terms first: this is a safety net
        ),
    )
    await connection.close()


async def _delete(name: str) -> None:
    connection = await _connect()
    await connection.jetstream().delete_stream(name)
    await connection.close()


async def _publish(subject: str, event: dict[str, Any], message_id: str = "") -> None:
    connection = await _connect()
    # JetStream drops a second publish of one Nats-Msg-Id within its duplicate window.
    headers = {"Nats-Msg-Id": message_id or event["id"]}
    await connection.jetstream().publish(subject, json.dumps(event).encode(), headers=headers)
    await connection.close()


async def _pending(name: str) -> tuple[int, int]:
    connection = await _connect()
    info = await connection.jetstream().consumer_info(name, f"{name}_durable")
    await connection.close()
    return info.num_pending, info.num_ack_pending


@contextmanager
def consumer(traces: Path, stream: tuple[str, str, str]) -> Iterator[subprocess.Popen[bytes]]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": database_url(),
        "IDEMPOTENCY_TEST_TRACES": str(traces),
        "NATS_URL": NATS_URL,
    }
    with (traces / "consumer.log").open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.consumer_nats", *stream],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            yield process
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)


def steps(traces: Path, step: str, event_id: str) -> int:
    path = traces / "trace"
    lines = path.read_text().splitlines() if path.exists() else []
    return lines.count(f"{step} {event_id}")


def wait_for(condition: Callable[[], bool], what: str, traces: Path) -> None:
    deadline = time.monotonic() + PATIENCE
    while not condition():
        if time.monotonic() > deadline:
            log = (traces / "consumer.log").read_text()[-4000:]
            trace = (traces / "trace").read_text() if (traces / "trace").exists() else ""
            raise AssertionError(f"gave up waiting for {what}:\n{trace}\n{log}")
        time.sleep(0.1)


def test_killed_after_the_commit_and_before_the_ack_the_redelivery_replays_once(
    tmp_path: Path, stream: tuple[str, str, str]
) -> None:
    (tmp_path / "hold-e1").touch()
    run(_publish(stream[1], {"id": "e1", "amount": 10}))
    with consumer(tmp_path, stream) as first:
        wait_for(lambda: steps(tmp_path, "committed", "e1") == 1, "the commit", tmp_path)
        os.killpg(first.pid, signal.SIGKILL)
    (tmp_path / "hold-e1").unlink()
    assert Charge.objects.filter(reference="e1").count() == 1
    assert steps(tmp_path, "acked", "e1") == 0
    with consumer(tmp_path, stream):
        wait_for(lambda: steps(tmp_path, "acked", "e1") == 1, "the redelivery's ack", tmp_path)
        wait_for(lambda: run(_pending(stream[0])) == (0, 0), "nothing left pending", tmp_path)
    assert steps(tmp_path, "replayed", "e1") == 1
    assert steps(tmp_path, "ran", "e1") == 1
    assert Charge.objects.filter(reference="e1").count() == 1


def test_a_poison_message_is_terminated_and_leaves_its_key_free(
    tmp_path: Path, stream: tuple[str, str, str]
) -> None:
    run(_publish(stream[1], {"id": "p1", "amount": "poison"}))
    run(_publish(stream[1], {"id": "e2", "amount": 5}))
    with consumer(tmp_path, stream):
        wait_for(lambda: steps(tmp_path, "termed", "p1") == 1, "the poison's end", tmp_path)
        wait_for(lambda: steps(tmp_path, "acked", "e2") == 1, "the next event", tmp_path)
        assert steps(tmp_path, "ran", "p1") == MAX_DELIVER
        assert not IdempotencyEntry.objects.filter(key__endswith="\x1fp1").exists()
        # The producer fixes the event and sends it again (a new message id): it runs once.
        run(_publish(stream[1], {"id": "p1", "amount": 7, "fixed": True}, "p1-fixed"))
        wait_for(lambda: steps(tmp_path, "acked", "p1") == 1, "the fixed event", tmp_path)
        wait_for(lambda: run(_pending(stream[0])) == (0, 0), "nothing left pending", tmp_path)
    assert Charge.objects.filter(reference="p1").count() == 1
