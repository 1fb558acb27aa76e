"""RabbitMQ (kombu): ``ack`` after the commit; a retry waits in a delay queue and comes
back; a dead letter is rejected to the queue's dead-letter exchange.

::

    from idempotency_django.consumers import rabbitmq as preset

    with Connection(url, transport_options={"confirm_publish": True}) as connection:
        queues = preset.declare(connection, "orders")
        producer = connection.Producer()

        def on_message(body, message):
            preset.handle(message, charge, queues=queues, producer=producer)

        with connection.Consumer(queues.main, callbacks=[on_message], prefetch_count=1):
            while True:
                connection.drain_events()

``declare(connection, name)`` makes, on one direct exchange ``name``: the queue
``name`` (rejected messages dead-letter to ``name.dead``), ``name.retry``
(expired messages dead-letter back to ``name``) and ``name.dead``. A retry is
published to ``name.retry`` with the verdict's delay as its expiration, then the
delivery is acked: killed in between, the message comes back twice and the
second finds it done (a replay). The retry keeps the message's properties
(``correlation_id``, ``reply_to``, ``priority``...) and headers. RabbitMQ expires only a queue's head, so a long
delay ahead holds the shorter ones behind it for as long. The message id is the
AMQP ``message_id`` property unless ``key`` says otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from idempotency_django.consumers.core import consume, identified
from idempotency_django.consumers.policy import DEAD_LETTER, RETRY, Verdict

#: Properties a retry sets itself; every other one the message had is kept. A
#: ``user_id`` is dropped: RabbitMQ refuses one that is not the publishing connection's.
_REPLACED: Final = frozenset(
    {
        "content_type",
        "content_encoding",
        "application_headers",
        "expiration",
        "delivery_mode",
        "user_id",
    }
)


@dataclass(frozen=True)
class Queues:
    """The exchange and the three queues of one consumer (see :func:`declare`)."""

    exchange: Any
    main: Any
    retry: Any
    dead: Any


def queues(name: str) -> Queues:
    """The kombu entities of :func:`declare`, undeclared."""
    from kombu import Exchange, Queue

    exchange = Exchange(name, "direct", durable=True)

    def queue(suffix: str, back_to: str) -> Any:
        routed = f"{name}{suffix}"
        dead_letter = {"x-dead-letter-exchange": name, "x-dead-letter-routing-key": back_to}
        return Queue(routed, exchange, routing_key=routed, queue_arguments=dead_letter)

    dead = Queue(f"{name}.dead", exchange, routing_key=f"{name}.dead")
    return Queues(exchange, queue("", f"{name}.dead"), queue(".retry", name), dead)


def declare(connection: Any, name: str) -> Queues:
    """Declare :func:`queues` ``(name)`` on ``connection``'s default channel."""
    made = queues(name)
    channel = connection.default_channel
    for queue in (made.main, made.retry, made.dead):
        queue.bind(channel).declare()
    return made


def handle(
    message: Any,
    handler: Callable[[Any], Any],
    *,
    queues: Queues,
    producer: Any,
    key: Callable[[Any], str] | None = None,
    **options: Any,
) -> Verdict:
    """Run ``handler(message)`` once per message id (see :func:`.consume`), then settle it."""
    found = identified(lambda: message_id(message, key))
    verdict = (
        found if isinstance(found, Verdict) else consume(found, lambda: handler(message), **options)
    )
    settle(message, verdict, queues=queues, producer=producer)
    return verdict


def message_id(message: Any, key: Callable[[Any], str] | None = None) -> str:
    if key is not None:
        return key(message)
    found = message.properties.get("message_id")
    if not found:
        raise ValueError(
            "The message has no message_id property: publish with one, or pass key=... "
            "(a function of the message returning its id)."
        )
    return str(found)


def settle(message: Any, verdict: Verdict, *, queues: Queues, producer: Any) -> None:
    """Tell RabbitMQ what the verdict says."""
    if verdict.action == RETRY:
        kept = {name: value for name, value in message.properties.items() if name not in _REPLACED}
        producer.publish(
            message.body,
            exchange=queues.exchange,
            routing_key=queues.retry.routing_key,
            expiration=max(verdict.delay, 0.001),
            headers=message.headers,
            content_type=message.content_type,
            content_encoding=message.content_encoding,
            delivery_mode=2,
            retry=True,
            **kept,  # correlation_id, reply_to, priority, message_id, type, timestamp...
        )
        message.ack()
    elif verdict.action == DEAD_LETTER:
        message.reject(requeue=False)  # to name.dead, through the queue's dead-letter exchange
    else:
        message.ack()


__all__ = ["Queues", "declare", "handle", "message_id", "queues", "settle"]
