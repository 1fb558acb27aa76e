"""Message consumers: run a handler once per message id, and say what to tell the broker.

``consume(message_id, handler)`` runs ``handler()`` inside the claim's transaction
(:func:`~idempotency_django.calls.idempotent_call`, scope ``"consumer"`` by default)
and returns a :class:`Verdict`, from one table for every broker:

=================================================  ==================================
what happened                                      ``.action``
=================================================  ==================================
ran and committed, or a finished duplicate         ``"ack"``
another consumer holds the message id              ``"retry"``, its ``Retry-After``
the store is away (claim, record, commit, the      ``"retry"``, never counted as a failure
connection lost)
the handler raised (its own database errors        ``"retry"``, with backoff
too); the give-up policy allows another try
the handler raised for the policy's last time,     ``"dead_letter"`` (its key left free)
or its last runs never finished (process killed)
the id cannot be stored (empty, NUL, too long)     ``"dead_letter"``, never run
=================================================  ==================================

Runs are counted durably, before the handler starts, by the delivery that holds the claim
(never one that waited for it), in :class:`~.models.ConsumerFailure` (this app in
``INSTALLED_APPS``), or taken from the broker (``attempt=``, a delivery count).
Presets translate the verdict for each broker: ``idempotency_django.consumers.<broker>``.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from idempotency_django.consumers.policy import ACK, DEAD_LETTER, RETRY, Action, GiveUp, Verdict

if TYPE_CHECKING:
    from idempotency_django.consumers.core import aconsume, consume, current_call

__all__ = [
    "ACK",
    "DEAD_LETTER",
    "RETRY",
    "Action",
    "GiveUp",
    "Verdict",
    "aconsume",
    "consume",
    "current_call",
]
_CORE = frozenset({"aconsume", "consume", "current_call"})


def __getattr__(name: str) -> Any:
    # The core imports the entries' model: only once the app registry is ready
    # (this package is an app too, for its ConsumerFailure table).
    if name in _CORE:
        return getattr(import_module("idempotency_django.consumers.core"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
