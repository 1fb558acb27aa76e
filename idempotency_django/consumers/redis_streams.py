"""Redis Streams (redis-py): ``XACK`` after the commit; a retry stays pending and comes
back through ``XAUTOCLAIM``; a dead letter moves to a dead-letter stream.

::

    from idempotency_django.consumers import redis_streams as preset

    while True:
        for entry_id, fields in preset.next_entries(r, "orders", "billing", "worker-1"):
            preset.handle(r, "orders", "billing", entry_id, fields, charge,
                          dead_letter_stream="orders.dead")

The message id is the entry's ``id`` field (the producer's id) unless ``key``
says otherwise; the stream's own entry id would also do, but a producer that
adds one event twice gives it two entry ids. A retry is left pending: it comes
back once it has been idle ``min_idle`` seconds (``next_entries``' claim), so
that is the retry delay here, whatever ``Verdict.delay`` asks. The dead letter's
``XADD`` and ``XACK`` run in one ``MULTI``: it is moved exactly once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from idempotency_django.consumers.core import consume, identified
from idempotency_django.consumers.policy import ACK, DEAD_LETTER, Verdict

Fields = Mapping[Any, Any]
ID_FIELD = "id"


def handle(
    client: Any,
    stream: str,
    group: str,
    entry_id: Any,
    fields: Fields,
    handler: Callable[[Fields], Any],
    *,
    key: Callable[[Fields], str] | None = None,
    dead_letter_stream: str | None = None,
    **options: Any,
) -> Verdict:
    """Run ``handler(fields)`` once per message id (see :func:`.consume`), then settle it."""
    found = identified(lambda: message_id(fields, key))
    verdict = (
        found if isinstance(found, Verdict) else consume(found, lambda: handler(fields), **options)
    )
    settle(client, stream, group, entry_id, fields, verdict, dead_letter_stream)
    return verdict


def message_id(fields: Fields, key: Callable[[Fields], str] | None = None) -> str:
    if key is not None:
        return key(fields)
    found = fields.get(ID_FIELD, fields.get(ID_FIELD.encode()))
    if not found:
        raise ValueError(
            f"The entry has no {ID_FIELD!r} field: add one, or pass key=... "
            "(a function of the fields returning the message's id)."
        )
    return found.decode() if isinstance(found, bytes) else str(found)


def settle(
    client: Any,
    stream: str,
    group: str,
    entry_id: Any,
    fields: Fields,
    verdict: Verdict,
    dead_letter_stream: str | None = None,
) -> None:
    """Tell the stream what the verdict says (a retry: nothing, it stays pending)."""
    if verdict.action == ACK:
        client.xack(stream, group, entry_id)
    elif verdict.action == DEAD_LETTER:
        with client.pipeline(transaction=True) as moves:
            if dead_letter_stream is not None:
                error = repr(verdict.error)[:500]
                moves.xadd(dead_letter_stream, {**fields, "idempotency_error": error})
            moves.xack(stream, group, entry_id)
            moves.execute()


def next_entries(
    client: Any,
    stream: str,
    group: str,
    consumer: str,
    *,
    count: int = 10,
    block: float = 1.0,
    min_idle: float = 30.0,
) -> list[tuple[Any, Fields]]:
    """Entries to handle: those pending longer than ``min_idle`` seconds (retries, and
    a dead consumer's), else new ones (waiting up to ``block`` seconds)."""
    claimed = client.xautoclaim(stream, group, consumer, int(min_idle * 1000), count=count)
    stale = [(entry_id, fields) for entry_id, fields in claimed[1] if fields is not None]
    if stale:
        return stale
    fresh = client.xreadgroup(group, consumer, {stream: ">"}, count=count, block=int(block * 1000))
    return [entry for _, entries in fresh or [] for entry in entries]


__all__ = ["ID_FIELD", "handle", "message_id", "next_entries", "settle"]
