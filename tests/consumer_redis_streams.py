"""A Redis Streams consumer on the preset (docs/consumers.rst shows these lines).

Run by tests/test_consumer_redis_streams.py as
``python -m tests.consumer_redis_streams STREAM GROUP CONSUMER``; see
tests/consumer_harness.py for what it traces and where the tests kill it.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from tests import consumer_harness as harness


def run(stream: str, group: str, consumer: str) -> None:
    import redis

    from idempotency_django.consumers import redis_streams as preset

    client = redis.Redis.from_url(os.environ["REDIS_URL"])
    while True:
        for entry_id, fields in preset.next_entries(client, stream, group, consumer, min_idle=0.5):
            verdict = preset.handle(
                client,
                stream,
                group,
                entry_id,
                fields,
                lambda fields: harness.charge(fields[b"body"]),
                dead_letter_stream=f"{stream}.dead",
                policy=harness.POLICY,
            )
            harness.settled(verdict, _id(fields))


def _id(fields: Any) -> str:
    return str(fields[b"id"].decode())


if __name__ == "__main__":
    harness.setup()
    run(*sys.argv[1:4])
