"""Amazon SQS (boto3): ``DeleteMessage`` after the commit; a retry sets the message's
visibility timeout to the delay; a dead letter is sent to a dead-letter queue, then deleted.

::

    from idempotency_django.consumers import sqs as preset

    while True:
        found = client.receive_message(QueueUrl=url, WaitTimeSeconds=20,
                                       MessageAttributeNames=["All"])
        for message in found.get("Messages", []):
            preset.handle(client, url, message, charge, dead_letter_queue_url=dead_url)

The message id is the ``message_id`` message attribute (the producer's id), else
SQS's ``MessageId`` (which survives a redelivery, not a producer sending one
event twice). Keep the queue's own redrive policy as a safety net, with a
``maxReceiveCount`` well above the policy's ``max_attempts``: store outages and
busy keys are received again too. Tested with botocore's ``Stubber``, not SQS.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from idempotency_django.consumers.core import consume, identified
from idempotency_django.consumers.policy import ACK, DEAD_LETTER, Verdict

ID_ATTRIBUTE = "message_id"
#: SQS's largest visibility timeout, in seconds (12 hours).
MAX_VISIBILITY = 43_200
Message = Mapping[str, Any]


def handle(
    client: Any,
    queue_url: str,
    message: Message,
    handler: Callable[[Message], Any],
    *,
    dead_letter_queue_url: str,
    key: Callable[[Message], str] | None = None,
    **options: Any,
) -> Verdict:
    """Run ``handler(message)`` once per message id (see :func:`.consume`), then settle it."""
    found = identified(lambda: message_id(message, key))
    verdict = (
        found if isinstance(found, Verdict) else consume(found, lambda: handler(message), **options)
    )
    settle(client, queue_url, message, verdict, dead_letter_queue_url=dead_letter_queue_url)
    return verdict


def message_id(message: Message, key: Callable[[Message], str] | None = None) -> str:
    if key is not None:
        return key(message)
    attribute = message.get("MessageAttributes", {}).get(ID_ATTRIBUTE, {})
    return str(attribute.get("StringValue") or message["MessageId"])


def settle(
    client: Any, queue_url: str, message: Message, verdict: Verdict, *, dead_letter_queue_url: str
) -> None:
    """Delete (ack), hide for the delay (retry), or move to the dead-letter queue."""
    receipt = message["ReceiptHandle"]
    if verdict.action == ACK:
        client.delete_message(QueueUrl=queue_url, ReceiptHandle=receipt)
    elif verdict.action == DEAD_LETTER:
        attributes = {
            **message.get("MessageAttributes", {}),
            "idempotency_error": {"DataType": "String", "StringValue": repr(verdict.error)[:500]},
        }
        client.send_message(
            QueueUrl=dead_letter_queue_url,
            MessageBody=message["Body"],
            MessageAttributes=attributes,
        )
        client.delete_message(QueueUrl=queue_url, ReceiptHandle=receipt)
    else:
        hidden = min(MAX_VISIBILITY, math.ceil(verdict.delay))
        client.change_message_visibility(
            QueueUrl=queue_url, ReceiptHandle=receipt, VisibilityTimeout=hidden
        )


__all__ = ["ID_ATTRIBUTE", "handle", "message_id", "settle"]
