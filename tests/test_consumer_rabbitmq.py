"""The RabbitMQ preset's real server (``idempotency_django.consumers.rabbitmq``): an
exchange and queues of each test's own (:class:`Rabbit`). tests/test_consumer_contract.py
runs every scenario of tests/consumer_harness.py over it."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import consumer_harness as harness
from tests.celery_harness import RABBITMQ_URL, broker_url

pytestmark = [
    pytest.mark.requires_postgres,
    pytest.mark.system,
    pytest.mark.django_db(transaction=True),
]


class Rabbit:
    """An exchange and queues of this test's own (names never shared)."""

    def __init__(self) -> None:
        from kombu import Connection

        from idempotency_django.consumers import rabbitmq as preset

        self.name = f"idem_consumer_{uuid.uuid4().hex[:10]}"
        self.connection = Connection(RABBITMQ_URL, transport_options={"confirm_publish": True})
        self.queues = preset.declare(self.connection, self.name)
        self.dead: list[str] = []

    def publish(self, *events: dict[str, Any]) -> None:
        producer = self.connection.Producer()
        for event in events:
            producer.publish(
                json.dumps(event).encode(),
                exchange=self.queues.exchange,
                routing_key=self.name,
                content_type="application/json",
                content_encoding="utf-8",
                message_id=harness.wire_id(event),
                delivery_mode=2,
            )

    def _ready(self, queue: Any) -> int:
        declared = queue.bind(self.connection.default_channel).queue_declare(passive=True)
        return int(declared.message_count)

    def drained(self) -> bool:
        return self._ready(self.queues.main) + self._ready(self.queues.retry) == 0

    def dead_letters(self) -> list[str]:
        dead = self.queues.dead.bind(self.connection.default_channel)
        while (message := dead.get(no_ack=True)) is not None:
            self.dead.append(harness.event_id(message.body))
        return self.dead

    def consumer(self, traces: Path, database: str) -> Any:
        return harness.consumer(
            traces, "tests.consumer_rabbitmq", [self.name], database, RABBITMQ_URL=RABBITMQ_URL
        )

    def delete(self) -> None:
        channel = self.connection.default_channel
        for queue in (self.queues.main, self.queues.retry, self.queues.dead):
            queue.bind(channel).delete()
        self.queues.exchange.bind(channel).delete()
        self.connection.release()


@pytest.fixture
def rabbit() -> Iterator[Rabbit]:
    pytest.importorskip("kombu")
    broker_url("rabbitmq")  # skips (fails under CI) when RabbitMQ is unreachable
    made = Rabbit()
    try:
        yield made
    finally:
        made.delete()
