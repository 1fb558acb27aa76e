"""A NATS JetStream consumer on the preset (docs/consumers.rst shows these lines).

Run by tests/test_consumer_nats.py as ``python -m tests.consumer_nats STREAM SUBJECT DURABLE``;
see tests/consumer_harness.py for what it traces and where the tests kill it.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from tests import consumer_harness as harness


async def on_message(msg: Any, js: Any, dead_letters: str) -> None:
    from idempotency_django.consumers import nats as preset

    verdict = await preset.handle(
        msg,
        lambda msg: harness.charge(msg.data),
        key=lambda msg: harness.event_id(msg.data),
        js=js,
        dead_letter_subject=dead_letters,
        policy=harness.POLICY,
    )
    harness.settled(verdict, harness.event_id(msg.data))


async def run(stream: str, subject: str, durable: str) -> None:
    import nats

    connection = await nats.connect(os.environ.get("NATS_URL", "nats://127.0.0.1:4222"))
    js = connection.jetstream()
    subscription = await js.pull_subscribe(subject, durable=durable, stream=stream)
    while True:
        try:
            messages = await subscription.fetch(1, timeout=1)
        except TimeoutError:
            continue
        for msg in messages:
            await on_message(msg, js, f"{stream}_dead.events")


if __name__ == "__main__":
    harness.setup()
    asyncio.run(run(*sys.argv[1:4]))
