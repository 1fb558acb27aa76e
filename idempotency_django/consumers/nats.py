"""NATS JetStream: ``ack`` after the commit, ``nak(delay)`` to retry, ``term`` a dead letter.

::

    from idempotency_django.consumers import nats as preset

    async def on_message(msg):
        await preset.handle(msg, charge, js=js, dead_letter_subject="orders.dead")

The message id is the ``Nats-Msg-Id`` header (the producer's id, which JetStream
also de-duplicates on) unless ``key`` says otherwise. A dead letter is published
to ``dead_letter_subject`` (with its headers and an ``Idempotency-Error`` one)
before it is ``term``-ed; killed between the two, it is published there twice.
The consumer's ``max_deliver`` must stay above the policy's ``max_attempts``
(unlimited is best): store outages and busy keys are redelivered too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from idempotency_django.consumers.core import aconsume, identified
from idempotency_django.consumers.policy import DEAD_LETTER, RETRY, Verdict

MSG_ID = "Nats-Msg-Id"


async def handle(
    msg: Any,
    handler: Callable[[Any], Any],
    *,
    key: Callable[[Any], str] | None = None,
    js: Any = None,
    dead_letter_subject: str | None = None,
    **options: Any,
) -> Verdict:
    """Run ``handler(msg)`` once per message id (see :func:`.consume`), then settle ``msg``."""
    found = identified(lambda: message_id(msg, key))
    verdict = (
        found
        if isinstance(found, Verdict)
        else await aconsume(found, lambda: handler(msg), **options)
    )
    await settle(msg, verdict, js=js, dead_letter_subject=dead_letter_subject)
    return verdict


def message_id(msg: Any, key: Callable[[Any], str] | None = None) -> str:
    if key is not None:
        return key(msg)
    found = (msg.headers or {}).get(MSG_ID)
    if not found:
        raise ValueError(
            f"The message has no {MSG_ID} header: publish with one, or pass key=... "
            "(a function of the message returning its id)."
        )
    return str(found)


async def settle(
    msg: Any, verdict: Verdict, *, js: Any = None, dead_letter_subject: str | None = None
) -> None:
    """Tell JetStream what the verdict says."""
    if verdict.action == RETRY:
        await msg.nak(delay=verdict.delay)
    elif verdict.action == DEAD_LETTER:
        if dead_letter_subject is not None:
            if js is None:
                raise TypeError("dead_letter_subject needs js= (the JetStream context).")
            headers = {**(msg.headers or {}), "Idempotency-Error": repr(verdict.error)[:500]}
            await js.publish(dead_letter_subject, msg.data, headers=headers)
        await msg.term()
    else:
        await msg.ack()


__all__ = ["MSG_ID", "handle", "message_id", "settle"]
