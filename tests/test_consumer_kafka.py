"""The Kafka preset (``idempotency_django.consumers.kafka``) with the real confluent-kafka
client against librdkafka's in-process mock cluster: no Kafka server runs here.

A consumer that committed the handler's transaction and died before committing the
offset leaves the message to the next member of its group: replayed, one effect. A
poison message is run again in place (the partition waits) until the policy gives
up, then produced to the dead-letter topic and its offset committed.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from idempotency_django.consumers import GiveUp, Verdict, consume
from idempotency_django.models import IdempotencyEntry
from tests.testapp.models import Charge

kafka = pytest.importorskip("confluent_kafka")
# A few seconds of group joins per test: on the PostgreSQL tier only (nothing here
# depends on the database's engine).
pytestmark = [pytest.mark.requires_postgres, pytest.mark.django_db]
POLICY = GiveUp(max_attempts=3, backoff=0.01)
PATIENCE = 60.0


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """An in-process mock cluster, kept alive by its producer; its bootstrap servers."""
    owner = kafka.Producer({"test.mock.num.brokers": 1, "log_level": 0})
    brokers = owner.list_topics(timeout=10).brokers.values()
    yield ",".join(f"{broker.host}:{broker.port}" for broker in brokers)
    owner.flush(1)


def produce(servers: str, topic: str, *events: tuple[str, bytes]) -> None:
    producer = kafka.Producer({"bootstrap.servers": servers, "log_level": 0})
    for event, value in events:
        # One partition: its order is the one Kafka keeps.
        producer.produce(topic, value=value, partition=0, headers=[("message_id", event.encode())])
    assert producer.flush(10) == 0


def member(servers: str, topic: str, group: str) -> Any:
    consumer = kafka.Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "log_level": 0,
            # The mock cluster waits out a member's session before it rebalances.
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            "topic.metadata.refresh.interval.ms": 500,
        }
    )
    consumer.subscribe([topic])
    return consumer


def poll(consumer: Any) -> Any:
    deadline = time.monotonic() + PATIENCE
    while time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            return msg
    raise AssertionError("no message came")


def charge(msg: Any) -> None:
    Charge.objects.create(reference=msg.headers()[0][1].decode(), amount=int(msg.value()))


def test_a_crash_before_the_offset_commit_is_replayed_once(cluster: str) -> None:
    from idempotency_django.consumers import kafka as preset

    topic, group = f"orders-{uuid.uuid4().hex[:8]}", "billing"
    produce(cluster, topic, ("e1", b"10"))
    first = member(cluster, topic, group)
    msg = poll(first)
    assert consume(preset.message_id(msg), lambda: charge(msg)).outcome == "executed"
    first.close()  # died before committing the offset
    second = member(cluster, topic, group)
    again = poll(second)
    assert (again.offset(), preset.handle(second, again, charge).outcome) == (0, "replayed")
    second.close()
    assert Charge.objects.filter(reference="e1").count() == 1


def test_a_poison_message_is_retried_in_place_then_dead_lettered(
    cluster: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from idempotency_django.consumers import kafka as preset

    waits: list[float] = []
    monkeypatch.setattr(preset, "sleep", waits.append)
    topic, group = f"orders-{uuid.uuid4().hex[:8]}", "billing"
    produce(cluster, topic, ("p1", b"poison"), ("e2", b"5"))
    producer = kafka.Producer({"bootstrap.servers": cluster, "log_level": 0})
    consumer = member(cluster, topic, group)
    outcomes: list[tuple[str, str]] = []
    while len(outcomes) < 2:
        msg = poll(consumer)
        verdict = preset.handle(
            consumer,
            msg,
            charge,
            producer=producer,
            dead_letter_topic=f"{topic}.dead",
            policy=POLICY,
        )
        outcomes.append((preset.message_id(msg), verdict.action))
    consumer.close()
    # The poison ran 3 times in place, its partition waiting, in order.
    assert outcomes == [("p1", "dead_letter"), ("e2", "ack")]
    assert waits == [0.01, 0.02]
    dead = member(cluster, f"{topic}.dead", "audit")
    parked = poll(dead)
    dead.close()
    assert (parked.value(), parked.headers()[0]) == (b"poison", ("message_id", b"p1"))
    assert not IdempotencyEntry.objects.filter(key__endswith="\x1fp1").exists()


def test_the_message_id_falls_back_to_the_offset() -> None:
    from idempotency_django.consumers import kafka as preset

    class Msg:
        def headers(self) -> None:
            return None

        def topic(self) -> str:
            return "orders"

        def partition(self) -> int:
            return 2

        def offset(self) -> int:
            return 41

    assert preset.message_id(Msg()) == "orders:2:41"
    with pytest.raises(TypeError, match="producer"):
        preset.handle(None, Msg(), charge, dead_letter_topic="dead")
    with pytest.raises(ValueError, match="settled"):
        preset.settle(None, Msg(), Verdict("retry", 1.0))
