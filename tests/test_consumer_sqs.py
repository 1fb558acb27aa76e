"""The SQS preset (``idempotency_django.consumers.sqs``) against botocore's ``Stubber``:
no SQS runs here. Each verdict makes exactly the calls the docs' table says."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from idempotency_django.consumers import GiveUp
from idempotency_django.models import IdempotencyEntry
from tests.testapp.models import Charge

boto3 = pytest.importorskip("boto3")
from botocore.stub import ANY, Stubber  # noqa: E402

pytestmark = pytest.mark.django_db
URL = "https://sqs.eu-west-1.amazonaws.com/123456789012/orders"
DEAD = URL + "-dead"
POLICY = GiveUp(max_attempts=3, backoff=1.5)


@pytest.fixture
def sqs() -> Iterator[tuple[Any, Stubber]]:
    client = boto3.client(
        "sqs", region_name="eu-west-1", aws_access_key_id="test", aws_secret_access_key="test"
    )
    with Stubber(client) as stub:
        yield client, stub
        stub.assert_no_pending_responses()


def message(event: str, receipt: str, body: str = "10") -> dict[str, Any]:
    return {
        "MessageId": f"sqs-{receipt}",
        "ReceiptHandle": receipt,
        "Body": body,
        "MessageAttributes": {"message_id": {"DataType": "String", "StringValue": event}},
    }


def charge(msg: Mapping[str, Any]) -> None:
    event = msg["MessageAttributes"]["message_id"]["StringValue"]
    Charge.objects.create(reference=event, amount=int(msg["Body"]))


def handle(client: Any, msg: dict[str, Any]) -> str:
    from idempotency_django.consumers import sqs

    verdict = sqs.handle(client, URL, msg, charge, dead_letter_queue_url=DEAD, policy=POLICY)
    return verdict.outcome


def test_deleted_after_the_commit_and_a_redelivery_replays(sqs: tuple[Any, Stubber]) -> None:
    client, stub = sqs
    for receipt in ("r1", "r2"):  # the visibility timeout redelivers: a new receipt handle
        stub.add_response("delete_message", {}, {"QueueUrl": URL, "ReceiptHandle": receipt})
    assert handle(client, message("e1", "r1")) == "executed"
    assert handle(client, message("e1", "r2")) == "replayed"
    assert Charge.objects.filter(reference="e1").count() == 1


def test_a_poison_message_is_hidden_for_its_backoff_then_moved_to_the_dead_queue(
    sqs: tuple[Any, Stubber],
) -> None:
    client, stub = sqs
    poison = message("p1", "r1", body="poison")
    for seconds in (2, 3):  # 1.5 s, then 3 s: rounded up to whole seconds
        stub.add_response(
            "change_message_visibility",
            {},
            {"QueueUrl": URL, "ReceiptHandle": "r1", "VisibilityTimeout": seconds},
        )
    attributes = {
        **poison["MessageAttributes"],
        "idempotency_error": {"DataType": "String", "StringValue": ANY},
    }
    stub.add_response(
        "send_message",
        {"MessageId": "d1", "MD5OfMessageBody": "x"},
        {"QueueUrl": DEAD, "MessageBody": "poison", "MessageAttributes": attributes},
    )
    stub.add_response("delete_message", {}, {"QueueUrl": URL, "ReceiptHandle": "r1"})
    assert [handle(client, poison) for _ in range(3)] == ["failed", "failed", "exhausted"]
    assert not IdempotencyEntry.objects.exists()


def test_the_message_id_falls_back_to_sqs_own() -> None:
    from idempotency_django.consumers import sqs

    assert sqs.message_id({"MessageId": "abc"}) == "abc"
    assert sqs.message_id({"MessageId": "abc"}, key=lambda m: "mine") == "mine"
