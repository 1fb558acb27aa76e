"""Each preset turns a verdict into its broker's calls (recorded by small fakes here; the
real servers' proofs are tests/test_consumer_{nats,rabbitmq,redis_streams}.py)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from idempotency_django.consumers import Verdict
from idempotency_django.consumers import nats as nats_preset
from idempotency_django.consumers import rabbitmq as rabbit_preset
from idempotency_django.consumers import redis_streams as redis_preset

ACK, RETRY, DEAD = Verdict("ack"), Verdict("retry", 2.5), Verdict("dead_letter", error=KeyError())


class Recorder:
    """Any method call is recorded as (name, args, kwargs); async ones too."""

    def __init__(self, **attributes: Any) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.__dict__.update(attributes)

    def __getattr__(self, name: str) -> Any:
        def record(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, args, kwargs))
            return self

        return record

    def names(self) -> list[str]:
        return [name for name, *_ in self.calls]


class AsyncRecorder(Recorder):
    def __getattr__(self, name: str) -> Any:
        async def record(*args: Any, **kwargs: Any) -> None:
            self.calls.append((name, args, kwargs))

        return record


def test_nats_acks_naks_with_the_delay_and_terms_a_dead_letter() -> None:
    for verdict, expected in ((ACK, ["ack"]), (RETRY, ["nak"]), (DEAD, ["term"])):
        msg = AsyncRecorder(headers={"Nats-Msg-Id": "m"}, data=b"{}")
        asyncio.run(nats_preset.settle(msg, verdict))
        assert msg.names() == expected
    msg = AsyncRecorder(headers={"Nats-Msg-Id": "m"}, data=b"{}")
    asyncio.run(nats_preset.settle(msg, RETRY))
    assert msg.calls[0][2] == {"delay": 2.5}


def test_nats_publishes_a_dead_letter_before_terming_it() -> None:
    msg, js = AsyncRecorder(headers={"Nats-Msg-Id": "m"}, data=b"{}"), AsyncRecorder()
    asyncio.run(nats_preset.settle(msg, DEAD, js=js, dead_letter_subject="dead"))
    ((_, args, kwargs),) = js.calls
    assert args == ("dead", b"{}")
    assert kwargs["headers"]["Nats-Msg-Id"] == "m"
    assert "KeyError" in kwargs["headers"]["Idempotency-Error"]
    with pytest.raises(TypeError, match="js="):
        asyncio.run(nats_preset.settle(msg, DEAD, dead_letter_subject="dead"))


def test_nats_message_ids() -> None:
    assert nats_preset.message_id(Recorder(headers={"Nats-Msg-Id": "m"})) == "m"
    assert nats_preset.message_id(Recorder(headers=None), key=lambda msg: "k") == "k"
    with pytest.raises(ValueError, match="Nats-Msg-Id"):
        nats_preset.message_id(Recorder(headers=None))


def test_redis_acks_leaves_a_retry_pending_and_moves_a_dead_letter_atomically() -> None:
    client = Recorder()
    redis_preset.settle(client, "s", "g", "1-0", {"id": "m"}, ACK)
    redis_preset.settle(client, "s", "g", "1-0", {"id": "m"}, RETRY)
    assert client.names() == ["xack"]
    pipe = Recorder()
    client = Recorder(pipeline=lambda transaction: _Context(pipe))
    redis_preset.settle(client, "s", "g", "1-0", {"id": "m"}, DEAD, "s.dead")
    assert pipe.names() == ["xadd", "xack", "execute"]


class _Context:
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __enter__(self) -> Any:
        return self.inner

    def __exit__(self, *exc: object) -> None:
        return None


def test_redis_message_ids() -> None:
    assert redis_preset.message_id({b"id": b"m"}) == "m"
    assert redis_preset.message_id({"id": "m"}) == "m"
    assert redis_preset.message_id({}, key=lambda fields: "k") == "k"
    with pytest.raises(ValueError, match="'id' field"):
        redis_preset.message_id({})


def test_redis_next_entries_claims_stale_ones_first() -> None:
    stale = Recorder(xautoclaim=lambda *a, **k: ("0-0", [("1-0", {b"id": b"m"}), ("2-0", None)]))
    assert redis_preset.next_entries(stale, "s", "g", "c") == [("1-0", {b"id": b"m"})]
    fresh = Recorder(
        xautoclaim=lambda *a, **k: ("0-0", [], []),
        xreadgroup=lambda *a, **k: [[b"s", [("3-0", {b"id": b"n"})]]],
    )
    assert redis_preset.next_entries(fresh, "s", "g", "c") == [("3-0", {b"id": b"n"})]


def test_rabbitmq_acks_republishes_a_retry_with_its_delay_and_rejects_a_dead_letter() -> None:
    queues = rabbit_preset.queues("orders")
    assert queues.main.queue_arguments["x-dead-letter-routing-key"] == "orders.dead"
    assert queues.retry.queue_arguments["x-dead-letter-routing-key"] == "orders"
    for verdict, expected in ((ACK, ["ack"]), (RETRY, ["ack"]), (DEAD, ["reject"])):
        message, producer = _amqp_message(), Recorder()
        rabbit_preset.settle(message, verdict, queues=queues, producer=producer)
        assert message.names() == expected
        assert producer.names() == (["publish"] if verdict is RETRY else [])
    message, producer = _amqp_message(), Recorder()
    rabbit_preset.settle(message, RETRY, queues=queues, producer=producer)
    kwargs = producer.calls[0][2]
    assert (kwargs["routing_key"], kwargs["expiration"], kwargs["message_id"]) == (
        "orders.retry",
        2.5,
        "m",
    )
    assert message.calls == [("ack", (), {})]


def _amqp_message() -> Recorder:
    return Recorder(
        body=b"{}",
        headers={},
        content_type="application/json",
        content_encoding="utf-8",
        properties={"message_id": "m"},
    )


def test_rabbitmq_message_ids() -> None:
    assert rabbit_preset.message_id(_amqp_message()) == "m"
    assert rabbit_preset.message_id(Recorder(properties={}), key=lambda m: "k") == "k"
    with pytest.raises(ValueError, match="message_id"):
        rabbit_preset.message_id(Recorder(properties={}))


@pytest.mark.django_db(transaction=True)
def test_each_preset_runs_the_handler_once_and_settles() -> None:
    from tests.testapp.models import Charge

    def charge(reference: str) -> int:
        return Charge.objects.create(reference=reference, amount=1).pk

    for _ in range(2):  # a delivery, then its redelivery
        msg = AsyncRecorder(headers={"Nats-Msg-Id": "n1"}, data=b"{}")
        asyncio.run(nats_preset.handle(msg, lambda msg: charge("n1")))
        assert msg.names() == ["ack"]
        client = Recorder()
        redis_preset.handle(client, "s", "g", "1-0", {"id": "r1"}, lambda f: charge("r1"))
        assert client.names() == ["xack"]
        message = _amqp_message()
        rabbit_preset.handle(
            message, lambda m: charge("a1"), queues=rabbit_preset.queues("q"), producer=Recorder()
        )
        assert message.names() == ["ack"]
    assert sorted(Charge.objects.values_list("reference", flat=True)) == ["a1", "n1", "r1"]
    asyncio.run(sync_to_async(connections.close_all)())  # the ORM thread's, left open


def test_kafka_message_ids_and_an_undelivered_dead_letter() -> None:
    from idempotency_django.consumers import kafka as kafka_preset

    msg = Recorder(headers=lambda: [("message_id", "m")], value=lambda: b"{}", key=lambda: None)
    assert kafka_preset.message_id(msg) == "m"
    assert kafka_preset.message_id(msg, key=lambda msg: "k") == "k"
    stuck = Recorder(flush=lambda timeout: 1)  # one message still queued
    consumer = Recorder()
    with pytest.raises(RuntimeError, match="not delivered"):
        kafka_preset.settle(consumer, msg, DEAD, producer=stuck, dead_letter_topic="dead")
    assert consumer.calls == []  # its offset stays: the message comes back


def test_rabbitmq_a_retry_keeps_every_message_property() -> None:
    message = Recorder(
        body=b"{}",
        headers={"trace": "t1"},
        content_type="application/json",
        content_encoding="utf-8",
        properties={
            "message_id": "m",
            "correlation_id": "c-7",
            "reply_to": "answers",
            "priority": 5,
            "type": "order.created",
            "app_id": "shop",
            "timestamp": 1_700_000_000,
            "expiration": "60000",  # the original's: the retry's delay replaces it
            "application_headers": {"trace": "t1"},
        },
    )
    producer = Recorder()
    rabbit_preset.settle(message, RETRY, queues=rabbit_preset.queues("q"), producer=producer)
    kwargs = producer.calls[0][2]
    assert {name: kwargs.get(name) for name in ("correlation_id", "reply_to", "priority")} == {
        "correlation_id": "c-7",
        "reply_to": "answers",
        "priority": 5,
    }
    assert (kwargs["type"], kwargs["app_id"], kwargs["timestamp"]) == (
        "order.created",
        "shop",
        1_700_000_000,
    )
    assert (kwargs["expiration"], kwargs["headers"], kwargs["message_id"]) == (
        2.5,
        {"trace": "t1"},
        "m",
    )
    assert "application_headers" not in kwargs


@pytest.mark.django_db(transaction=True)
def test_each_preset_dead_letters_an_id_the_store_cannot_hold_and_goes_on() -> None:
    client, pipe = Recorder(), Recorder()
    client.__dict__["pipeline"] = lambda transaction: _Context(pipe)
    verdict = redis_preset.handle(client, "s", "g", "1-0", {"id": "x" * 300}, lambda f: None)
    assert verdict.outcome == "unstorable"
    assert pipe.names() == ["xack", "execute"]
    message = _amqp_message()
    message.properties["message_id"] = "nul\x00"
    rabbit_preset.handle(
        message, lambda m: None, queues=rabbit_preset.queues("q"), producer=Recorder()
    )
    assert message.names() == ["reject"]
    msg = AsyncRecorder(headers={"Nats-Msg-Id": "y" * 300}, data=b"{}")
    asyncio.run(nats_preset.handle(msg, lambda msg: None))
    assert msg.names() == ["term"]
    asyncio.run(sync_to_async(connections.close_all)())  # the ORM thread's, left open


@pytest.mark.django_db(transaction=True)
def test_a_message_without_an_id_is_a_dead_letter_not_an_exception() -> None:
    client, pipe = Recorder(), Recorder()
    client.__dict__["pipeline"] = lambda transaction: _Context(pipe)
    verdict = redis_preset.handle(client, "s", "g", "1-0", {"body": "{}"}, lambda f: None)
    assert (verdict.action, verdict.outcome) == ("dead_letter", "unstorable")
    assert "'id' field" in str(verdict.error)
    assert pipe.names() == ["xack", "execute"]
    message = _amqp_message()
    message.properties.pop("message_id")
    rabbit_preset.handle(
        message, lambda m: None, queues=rabbit_preset.queues("q"), producer=Recorder()
    )
    assert message.names() == ["reject"]
    msg = AsyncRecorder(headers=None, data=b"{}")
    asyncio.run(nats_preset.handle(msg, lambda msg: None))
    assert msg.names() == ["term"]
    # A key= function that cannot read the body (not JSON): the same.
    msg = AsyncRecorder(headers=None, data=b"not json")
    asyncio.run(
        nats_preset.handle(msg, lambda msg: None, key=lambda msg: json.loads(msg.data)["id"])
    )
    assert msg.names() == ["term"]
    asyncio.run(sync_to_async(connections.close_all)())  # the ORM thread's, left open
