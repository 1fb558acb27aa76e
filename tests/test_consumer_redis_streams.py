"""The Redis Streams preset's real server (``idempotency_django.consumers.redis_streams``):
a stream and consumer group of each test's own (:class:`Streams`).
tests/test_consumer_contract.py runs every scenario of tests/consumer_harness.py over it."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests import consumer_harness as harness
from tests.conftest import reachable, service_missing
from tests.settings import REDIS_URL

pytestmark = [
    pytest.mark.requires_postgres,
    pytest.mark.system,
    pytest.mark.django_db(transaction=True),
]


class Streams:
    """A stream and consumer group of this test's own (names never shared), and its
    dead-letter stream."""

    def __init__(self) -> None:
        import redis

        self.client = redis.Redis.from_url(REDIS_URL)
        self.stream = f"idem_consumer_{uuid.uuid4().hex[:10]}"
        self.group = "billing"
        self.client.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        self.workers = 0

    def publish(self, *events: dict[str, Any]) -> None:
        for event in events:
            self.client.xadd(self.stream, {"id": event["id"], "body": json.dumps(event)})

    def drained(self) -> bool:
        pending = self.client.xpending(self.stream, self.group)["pending"]
        info = self.client.xinfo_groups(self.stream)[0]
        return bool(pending == 0 and info["lag"] == 0)

    def dead_letters(self) -> list[str]:
        entries: list[tuple[bytes, dict[bytes, bytes]]] = self.client.xrange(f"{self.stream}.dead")  # type: ignore[assignment]
        return [fields[b"id"].decode() for _, fields in entries]

    def consumer(self, traces: Path, database: str) -> Any:
        self.workers += 1  # a new consumer name: the dead one's entries are claimed
        args = [self.stream, self.group, f"worker-{self.workers}"]
        return harness.consumer(
            traces, "tests.consumer_redis_streams", args, database, REDIS_URL=REDIS_URL
        )

    def delete(self) -> None:
        self.client.delete(self.stream, f"{self.stream}.dead")


@pytest.fixture
def streams() -> Iterator[Streams]:
    pytest.importorskip("redis")
    parts = urlsplit(REDIS_URL)
    if not reachable(parts.hostname or "127.0.0.1", parts.port or 6379):
        service_missing(f"Redis at {REDIS_URL} is unreachable")
    made = Streams()
    try:
        yield made
    finally:
        made.delete()
