"""Consumers, every way a message can fail, over every preset in-process: each broker's
client a recording stand-in (Celery, Kafka and SQS have no server in the real-broker table,
tests/test_consumer_contract.py; NATS, RabbitMQ and Redis Streams are here too, as their
translation). A delivery is settled as the broker hears it: "ack", "retry" or
"dead_letter"; a run that takes its process down is redelivered, as a broker would.

Expected for each: one effect or a dead letter after a bounded number of runs, and the
healthy message behind it handled.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import OperationalError, connection, connections

from idempotency_django.consumers import GiveUp
from idempotency_django.consumers.models import ConsumerFailure
from tests.testapp.models import Charge

pytestmark = pytest.mark.django_db(transaction=True)
POLICY = GiveUp(max_attempts=3, backoff=0.0, backoff_cap=0.0, unavailable_delay=0.0)
Handler = Callable[[], Any]


class ProcessDied(BaseException):
    """SIGKILL in-process: nothing after the handler runs (the real one is the contract's)."""


class Recorder:
    def __init__(self, **attributes: Any) -> None:
        self.calls: list[str] = []
        self.__dict__.update(attributes)

    def __getattr__(self, name: str) -> Any:
        def record(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return self

        return record


class AsyncRecorder(Recorder):
    def __getattr__(self, name: str) -> Any:
        async def record(*args: Any, **kwargs: Any) -> None:
            self.calls.append(name)

        return record


class _Pipeline:
    def __init__(self, client: Recorder) -> None:
        self.client = client

    def __enter__(self) -> Recorder:
        return self.client

    def __exit__(self, *exc: object) -> None:
        return None


# One delivery through each preset: what the broker was told.


def nats(message_id: str, handler: Handler) -> str:
    from idempotency_django.consumers import nats as preset

    msg = AsyncRecorder(headers={"Nats-Msg-Id": message_id}, data=b"{}")
    asyncio.run(preset.handle(msg, lambda msg: handler(), policy=POLICY))
    return {"ack": "ack", "nak": "retry", "term": "dead_letter"}[msg.calls[-1]]


def rabbitmq(message_id: str, handler: Handler) -> str:
    from idempotency_django.consumers import rabbitmq as preset

    message = Recorder(
        body=b"{}", headers={}, content_type="application/json", content_encoding="utf-8"
    )
    message.__dict__["properties"] = {"message_id": message_id}
    producer = Recorder()
    queues = preset.queues("orders")
    preset.handle(message, lambda m: handler(), queues=queues, producer=producer, policy=POLICY)
    if message.calls == ["reject"]:
        return "dead_letter"
    return "retry" if producer.calls == ["publish"] else "ack"


def redis_streams(message_id: str, handler: Handler) -> str:
    from idempotency_django.consumers import redis_streams as preset

    client = Recorder()
    client.__dict__["pipeline"] = lambda transaction: _Pipeline(client)
    fields = {"id": message_id}
    preset.handle(
        client, "s", "g", "1-0", fields, lambda f: handler(), dead_letter_stream="s.dead",
        policy=POLICY,
    )  # fmt: skip
    return {(): "retry", ("xack",): "ack", ("xadd", "xack", "execute"): "dead_letter"}[
        tuple(client.calls)
    ]


def kafka(message_id: str, handler: Handler) -> str:
    from idempotency_django.consumers import kafka as preset

    msg = Recorder(headers=lambda: [("message_id", message_id)], value=lambda: b"{}")
    msg.__dict__["key"] = lambda: None
    consumer, producer = Recorder(), Recorder(flush=lambda timeout: 0)
    preset.handle(
        consumer, msg, lambda m: handler(), producer=producer, dead_letter_topic="dead",
        policy=POLICY,
    )  # fmt: skip
    return "dead_letter" if producer.calls == ["produce"] else "ack"  # retries run in place


def sqs(message_id: str, handler: Handler) -> str:
    from idempotency_django.consumers import sqs as preset

    client = Recorder()
    message = {
        "MessageId": "sqs-1",
        "ReceiptHandle": "r",
        "Body": "{}",
        "MessageAttributes": {"message_id": {"DataType": "String", "StringValue": message_id}},
    }
    preset.handle(
        client, "q", message, lambda m: handler(), dead_letter_queue_url="dead", policy=POLICY
    )
    return {
        ("delete_message",): "ack",
        ("change_message_visibility",): "retry",
        ("send_message", "delete_message"): "dead_letter",
    }[tuple(client.calls)]


def celery(message_id: str, handler: Handler) -> str:
    from celery.exceptions import Reject, Retry

    from idempotency_django.consumers import celery as preset

    class Task:
        def retry(self, **options: Any) -> Retry:
            return Retry()

    try:
        preset.handle(Task(), message_id, handler, policy=POLICY)
    except Retry:
        return "retry"
    except Reject:
        return "dead_letter"
    return "ack"


PRESETS = {
    "nats": nats,
    "rabbitmq": rabbitmq,
    "redis_streams": redis_streams,
    "kafka": kafka,
    "sqs": sqs,
    "celery": celery,
}


@pytest.fixture(params=list(PRESETS))
def deliver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    if request.param == "kafka":
        from idempotency_django.consumers import kafka as preset

        monkeypatch.setattr(preset, "sleep", lambda seconds: None)
    yield PRESETS[request.param]
    asyncio.run(sync_to_async(connections.close_all)())  # the ORM thread's (NATS), left open


def until_settled(deliver: Any, message_id: str, handler: Handler, most: int = 20) -> list[str]:
    """Deliver until acked or dead-lettered; a delivery whose process died comes again."""
    told: list[str] = []
    while len(told) < most:
        try:
            told.append(deliver(message_id, handler))
        except ProcessDied:
            told.append("died")
            continue
        if told[-1] != "retry":
            return told
    return told


class Runs:
    """A handler that counts its runs and fails as told (or charges once)."""

    def __init__(self, reference: str, failure: Callable[[], None] | None = None) -> None:
        self.reference, self.failure, self.count = reference, failure, 0

    def __call__(self) -> dict[str, int]:
        self.count += 1
        if self.failure is not None:
            self.failure()
        return {"charge": Charge.objects.create(reference=self.reference, amount=1).pk}


def raises() -> None:
    raise ValueError("cannot be processed")


def own_database_error() -> None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL statement_timeout = '10ms'")
            cursor.execute("SELECT pg_sleep(5)")
    raise OperationalError("database is locked")  # SQLite's lock timeout, and the rest


def dies() -> None:
    raise ProcessDied()


def healthy_behind(deliver: Any) -> None:
    after = Runs("healthy")
    assert until_settled(deliver, "healthy", after)[-1] == "ack"
    assert Charge.objects.filter(reference="healthy").count() == 1


@pytest.mark.parametrize("failure", [raises, own_database_error, dies], ids=lambda f: f.__name__)
def test_a_failing_handler_runs_a_bounded_number_of_times_then_is_a_dead_letter(
    deliver: Any, failure: Callable[[], None]
) -> None:
    poison = Runs("poison", failure)
    told = until_settled(deliver, "poison", poison)
    assert told[-1] == "dead_letter"
    assert poison.count == POLICY.max_attempts
    assert not Charge.objects.filter(reference="poison").exists()
    assert ConsumerFailure.objects.get().dead_at is not None  # the admin's dead letter
    healthy_behind(deliver)


@pytest.mark.parametrize(
    "message_id", ["x" * 300, "nul\x00byte", "lone-\udc80"], ids=["long", "nul", "surrogate"]
)
def test_an_id_the_store_cannot_hold_is_a_dead_letter_unrun(deliver: Any, message_id: str) -> None:
    never = Runs("never")
    assert until_settled(deliver, message_id, never) == ["dead_letter"]
    assert never.count == 0
    healthy_behind(deliver)


def test_a_database_outage_is_retried_never_counted_then_runs_once(
    deliver: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from idempotency_django.consumers import classify

    outage = {"left": POLICY.max_attempts + 2}

    def away() -> None:
        if outage["left"]:
            outage["left"] -= 1
            raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(classify, "_answers", lambda using: not outage["left"])
    handler = Runs("through", away)
    told = until_settled(deliver, "through", handler)
    assert told[-1] == "ack"
    assert "dead_letter" not in told
    assert Charge.objects.filter(reference="through").count() == 1
    assert not ConsumerFailure.objects.exists()


def test_a_second_delivery_of_a_done_message_is_replayed(deliver: Any) -> None:
    handler = Runs("twice")
    assert until_settled(deliver, "twice", handler) == ["ack"]
    assert until_settled(deliver, "twice", handler) == ["ack"]
    assert handler.count == 1
    assert not ConsumerFailure.objects.exists()
