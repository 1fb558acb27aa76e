"""Publishing to Celery's broker with a confirmation and a time bound (this module imports Celery).

``send_task`` alone does neither: on py-amqp it returns once the frames are
written (a broker reset at that instant loses the message while the row is marked
sent), and a broker that is down costs seconds of kombu's and redis-py's own
connection retries. So the outbox publishes on connections of its own:

- py-amqp (RabbitMQ): ``confirm_publish`` (publisher confirms), waiting at most
  ``timeout`` for the broker's ack; a nack or no ack raises, the row stays pending;
- Redis: the ``LPUSH`` returns once the server stored the message; ``socket_timeout``
  bounds the wait;
- both: one connection attempt of at most ``timeout``, no retries (the relay is the retry).

A connection is kept per thread and broker URL, and dropped after any failure.
"""

from __future__ import annotations

import threading
from contextlib import suppress
from typing import Any

from celery import Celery
from kombu import Connection

_local = threading.local()


def send(app: Celery, row: Any, timeout: float) -> None:
    """Publish ``row``'s task under its key as task id; raise unless the broker has it."""
    connection = _connection(app, timeout)
    try:
        app.send_task(
            row.task,
            args=row.args,
            kwargs=row.kwargs,
            task_id=row.key,
            connection=connection,
            retry=False,
            timeout=timeout,
            confirm_timeout=timeout,
            **row.options,
        )
    except BaseException:
        _drop(app, timeout)
        raise


def _where(app: Celery, timeout: float) -> tuple[str, float]:
    return (str(app.conf.broker_write_url or app.conf.broker_url), timeout)


def _connection(app: Celery, timeout: float) -> Connection:
    cache: dict[tuple[str, float], Connection] = _local.__dict__.setdefault("connections", {})
    connection = cache.get(_where(app, timeout))
    if connection is None:
        options = {
            **(app.conf.broker_transport_options or {}),
            "confirm_publish": True,  # py-amqp: publisher confirms
            "max_retries": 0,  # kombu: one connection attempt
            "connect_retries_timeout": timeout,
            "socket_connect_timeout": timeout,  # redis-py
            "socket_timeout": timeout,
            "retry_on_timeout": False,
        }
        connection = app.connection_for_write(connect_timeout=timeout, transport_options=options)
        connection.ensure_connection(max_retries=0, timeout=timeout)  # type: ignore[arg-type]
        cache[_where(app, timeout)] = connection
    return connection


def _drop(app: Celery, timeout: float) -> None:
    cache: dict[tuple[str, float], Connection] = _local.__dict__.get("connections", {})
    connection = cache.pop(_where(app, timeout), None)
    if connection is not None:
        with suppress(Exception):  # a broken connection is dropped whatever it says
            connection.collect()
