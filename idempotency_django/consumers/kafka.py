"""Kafka (confluent-kafka): the offset is committed only after the handler's commit; a
retry waits and runs again in place; a dead letter is produced to a dead-letter topic.

::

    from idempotency_django.consumers import kafka as preset

    consumer = Consumer({..., "enable.auto.commit": False})
    while True:
        msg = consumer.poll(1)
        if msg is None or msg.error():
            continue
        preset.handle(consumer, msg, charge, producer=producer, dead_letter_topic="orders.dead")

Kafka cannot hold one message back and deliver the next: a retry sleeps
``verdict.delay`` and runs the message again, in place, until it is acked or
dead-lettered, so its partition waits, in order. Keep ``max.poll.interval.ms``
above the longest wait you expect (a store outage included): past it the group
rebalances and another member gets the message (replayed, if it was done). The
message id is the ``message_id`` header, else ``topic:partition:offset`` (which
survives a redelivery, not a producer sending one event twice). A crash after the
handler's commit and before the offset's redelivers the message: replayed.
Tested against librdkafka's in-process mock cluster, not a Kafka server.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from idempotency_django.consumers.core import consume, identified
from idempotency_django.consumers.policy import ACK, DEAD_LETTER, RETRY, Verdict

ID_HEADER = "message_id"


def handle(
    consumer: Any,
    msg: Any,
    handler: Callable[[Any], Any],
    *,
    producer: Any = None,
    dead_letter_topic: str | None = None,
    key: Callable[[Any], str] | None = None,
    **options: Any,
) -> Verdict:
    """Run ``handler(msg)`` once per message id (see :func:`.consume`), then settle it."""
    if dead_letter_topic is not None and producer is None:
        raise TypeError("dead_letter_topic needs producer= (a confluent_kafka.Producer).")
    found = identified(lambda: message_id(msg, key))
    if isinstance(found, Verdict):
        verdict = found
    else:
        verdict = consume(found, lambda: handler(msg), **options)
        while verdict.action == RETRY:
            sleep(verdict.delay)
            verdict = consume(found, lambda: handler(msg), **options)
    settle(consumer, msg, verdict, producer=producer, dead_letter_topic=dead_letter_topic)
    return verdict


def sleep(seconds: float) -> None:
    """How a retry waits (tests replace it)."""
    time.sleep(seconds)


def message_id(msg: Any, key: Callable[[Any], str] | None = None) -> str:
    if key is not None:
        return key(msg)
    for name, value in msg.headers() or []:
        if name == ID_HEADER and value:
            return value.decode() if isinstance(value, bytes) else str(value)
    return f"{msg.topic()}:{msg.partition()}:{msg.offset()}"


def settle(
    consumer: Any,
    msg: Any,
    verdict: Verdict,
    *,
    producer: Any = None,
    dead_letter_topic: str | None = None,
) -> None:
    """Commit the offset: acked, or once the dead letter is produced."""
    if verdict.action == ACK:
        consumer.commit(message=msg, asynchronous=False)
    elif verdict.action == DEAD_LETTER:
        if dead_letter_topic is not None:
            headers = [*(msg.headers() or []), ("idempotency_error", repr(verdict.error)[:500])]
            producer.produce(dead_letter_topic, value=msg.value(), key=msg.key(), headers=headers)
            if producer.flush(30):
                raise RuntimeError("the dead letter was not delivered: its offset stays")
        consumer.commit(message=msg, asynchronous=False)
    else:
        raise ValueError(f"A Kafka message is settled once acked or dead-lettered: {verdict}")


__all__ = ["ID_HEADER", "handle", "message_id", "settle"]
