"""The RabbitMQ preset (``idempotency_django.consumers.rabbitmq``) against a real server:
the scenarios of tests/consumer_harness.py (kill before the ack, a database outage
mid-stream, a poison message)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import consumer_harness as harness
from tests.celery_harness import RABBITMQ_URL, broker_url, database_url

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


def test_killed_after_the_commit_and_before_the_ack_the_redelivery_replays_once(
    tmp_path: Path, rabbit: Rabbit
) -> None:
    harness.killed_after_the_commit_and_before_the_ack(rabbit, tmp_path, database_url())


def test_a_database_outage_mid_stream_loses_nothing(tmp_path: Path, rabbit: Rabbit) -> None:
    harness.database_outage_mid_stream(rabbit, tmp_path, database_url())


def test_a_poison_message_is_dead_lettered_and_leaves_its_key_free(
    tmp_path: Path, rabbit: Rabbit
) -> None:
    harness.poison_is_dead_lettered_and_leaves_its_key_free(rabbit, tmp_path, database_url())
