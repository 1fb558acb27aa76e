"""main's replay cache at 97c0cf8 (before issue 10 item 5), kept to measure side by side.

Swapped in for ``idempotency_django.core.cache`` around the "before" samples only.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
import time
from datetime import timedelta

from django.core.cache import caches

from idempotency_django import signals
from idempotency_django.responses import StoredResponse

logger = logging.getLogger("idempotency_django")
PAUSE = 5.0
_paused_until: dict[str, float] = {}


def cache_key(tenant: str, key: str) -> str:
    # Hashed: keys are client-controlled and tenants may hold anything.
    digest = hashlib.sha256(json.dumps([tenant, key]).encode()).hexdigest()
    return f"idempotency:{digest}"


def get(alias: str, tenant: str, key: str) -> tuple[str, StoredResponse] | None:
    """``(fingerprint, answer)`` for a cached final answer, or ``None``."""
    if _paused(alias):
        return None
    try:
        value = caches[alias].get(cache_key(tenant, key))
    except Exception:
        logger.warning(_UNREACHABLE, alias, "using the database", PAUSE, exc_info=True)
        _failed(alias, "get")
        return None
    if not isinstance(value, dict):
        return None
    headers = [(str(name), str(text)) for name, text in value["headers"]]
    stored = StoredResponse(value["status"], headers, value["body"], value.get("reason", ""))
    return value["fingerprint"], stored


def put(
    alias: str, tenant: str, key: str, fingerprint: str, response: StoredResponse, ttl: timedelta
) -> None:
    """Cache a committed final answer for the rest of its TTL."""
    seconds = int(ttl.total_seconds())
    if seconds < 1 or _paused(alias):
        return  # about to expire (Django reads 0 as "don't cache"), or the cache is away
    value = {
        "fingerprint": fingerprint,
        "status": response.status,
        "headers": [list(h) for h in response.headers],
        "body": response.body,
        "reason": response.reason,
    }
    try:
        caches[alias].set(cache_key(tenant, key), value, timeout=seconds)
    except Exception:
        logger.warning(_UNREACHABLE, alias, "answer not cached", PAUSE, exc_info=True)
        _failed(alias, "set")


def _failed(alias: str, operation: str) -> None:
    _pause(alias)
    error = sys.exc_info()[1]
    signals.send(signals.cache_failed, sender=alias, alias=alias, operation=operation, error=error)


def _paused(alias: str) -> bool:
    return time.monotonic() < _paused_until.get(alias, 0.0)


def _pause(alias: str) -> None:
    _paused_until[alias] = time.monotonic() + PAUSE


_UNREACHABLE = "idempotency cache %r unreachable; %s, and it is left alone for %g s"
