"""A NATS JetStream consumer that processes each event once (docs/consumers.rst's recipe).

Run by tests/test_consumer_nats.py as ``python -m tests.consumer_nats STREAM SUBJECT DURABLE``
on the test database. It writes a trace line per step to ``$IDEMPOTENCY_TEST_TRACES/trace``,
and stops after the commit, before the ack, while ``hold-<event id>`` exists there: the test
kills it at that point.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import django

MAX_DELIVER = 3


def process(event: dict[str, Any]) -> tuple[bool, Any]:
    """The event's writes, committed once per event id; a redelivery returns the stored result."""
    from idempotency_django import idempotent_call
    from tests.testapp.models import Charge

    with idempotent_call(event["id"], scope="orders-consumer", arguments=event) as call:
        if not call.replayed:
            trace("ran", event["id"])
            made = Charge.objects.create(reference=event["id"], amount=int(event["amount"]))
            call.result = {"charge": made.pk}
    return call.replayed, call.result


async def handle(msg: Any, checkpoint: Callable[[str], Awaitable[None]]) -> None:
    """One delivery: process, then ack; nak what may succeed later; term a poison message."""
    from asgiref.sync import sync_to_async

    from idempotency_django.exceptions import RequestInProgress

    event = json.loads(msg.data)
    try:
        replayed, _ = await sync_to_async(process)(event)
    except RequestInProgress as held:
        # Another consumer (or a dead one's lease) holds the key: come back later.
        await msg.nak(delay=held.retry_after)
        return
    except Exception:
        # Rolled back, the key is free again. Past MAX_DELIVER it is poison: stop it
        # (park it on a dead-letter subject and alert, in a real consumer).
        if msg.metadata.num_delivered >= MAX_DELIVER:
            trace("termed", event["id"])
            await msg.term()
        else:
            await msg.nak(delay=0.2)
        return
    trace("replayed" if replayed else "committed", event["id"])
    await checkpoint(event["id"])  # the tests kill the consumer here
    await msg.ack()
    trace("acked", event["id"])


def trace(step: str, event_id: str) -> None:
    path = Path(os.environ["IDEMPOTENCY_TEST_TRACES"]) / "trace"
    with path.open("a") as out:
        out.write(f"{step} {event_id}\n")


async def hold(event_id: str) -> None:
    gate = Path(os.environ["IDEMPOTENCY_TEST_TRACES"]) / f"hold-{event_id}"
    while gate.exists():
        await asyncio.sleep(0.05)


async def consume(stream: str, subject: str, durable: str) -> None:
    import nats

    connection = await nats.connect(os.environ.get("NATS_URL", "nats://127.0.0.1:4222"))
    subscription = await connection.jetstream().pull_subscribe(
        subject, durable=durable, stream=stream
    )
    while True:
        try:
            messages = await subscription.fetch(1, timeout=1)
        except TimeoutError:
            continue
        for msg in messages:
            await handle(msg, hold)


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    django.setup()
    asyncio.run(consume(*sys.argv[1:4]))
