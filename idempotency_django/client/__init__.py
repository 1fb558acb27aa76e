"""The client half of the protocol, for httpx and requests (docs/client.rst).

``IdempotentTransport`` and ``AsyncIdempotentTransport`` need httpx (the ``[httpx]``
extra), ``IdempotentAdapter`` needs requests (``[requests]``); each is imported
only when asked for, so either library alone is enough, and importing
``idempotency_django`` needs neither.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from idempotency_django.client.policy import (
    HEADER,
    RetriesExhausted,
    RetryPolicy,
    new_key,
    retryable_status,
    uuid7,
)

if TYPE_CHECKING:
    from idempotency_django.client._httpx import AsyncIdempotentTransport, IdempotentTransport
    from idempotency_django.client._requests import IdempotentAdapter

_LAZY = {
    "IdempotentTransport": "idempotency_django.client._httpx",
    "AsyncIdempotentTransport": "idempotency_django.client._httpx",
    "IdempotentAdapter": "idempotency_django.client._requests",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "HEADER",
    "AsyncIdempotentTransport",
    "IdempotentAdapter",
    "IdempotentTransport",
    "RetriesExhausted",
    "RetryPolicy",
    "new_key",
    "retryable_status",
    "uuid7",
]
