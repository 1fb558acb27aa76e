"""A RabbitMQ consumer on the preset (docs/consumers.rst shows these lines).

Run by tests/test_consumer_rabbitmq.py as ``python -m tests.consumer_rabbitmq NAME``;
see tests/consumer_harness.py for what it traces and where the tests kill it.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from tests import consumer_harness as harness


def run(name: str) -> None:
    from kombu import Connection

    from idempotency_django.consumers import rabbitmq as preset

    url = os.environ["RABBITMQ_URL"]
    with Connection(url, transport_options={"confirm_publish": True}) as connection:
        queues = preset.declare(connection, name)
        producer = connection.Producer()

        def on_message(body: Any, message: Any) -> None:
            verdict = preset.handle(
                message,
                lambda message: harness.charge(message.body),
                queues=queues,
                producer=producer,
                key=lambda message: harness.event_id(message.body),
                policy=harness.POLICY,
            )
            harness.settled(verdict, harness.event_id(message.body))

        with connection.Consumer(queues.main, callbacks=[on_message], prefetch_count=1):
            while True:
                try:
                    connection.drain_events(timeout=1)
                except TimeoutError:
                    continue


if __name__ == "__main__":
    harness.setup()
    run(sys.argv[1])
