"""The optional replay cache (``IDEMPOTENCY_CACHE``): a fast path, never the truth.

Any cache error is logged and treated as a miss, so the database answers instead.
"""

from __future__ import annotations

import hashlib
import json
import logging
from datetime import timedelta

from django.core.cache import caches

from idempotency_django.responses import StoredResponse

logger = logging.getLogger("idempotency_django")


def cache_key(tenant: str, key: str) -> str:
    # Hashed: keys are client-controlled and tenants may hold anything.
    digest = hashlib.sha256(json.dumps([tenant, key]).encode()).hexdigest()
    return f"idempotency:{digest}"


def get(alias: str, tenant: str, key: str) -> tuple[str, StoredResponse] | None:
    """``(fingerprint, answer)`` for a cached final answer, or ``None``."""
    try:
        value = caches[alias].get(cache_key(tenant, key))
    except Exception:
        logger.warning("idempotency cache %r unreachable; using the database", alias, exc_info=True)
        return None
    if not isinstance(value, dict):
        return None
    stored = StoredResponse(value["status"], [tuple(h) for h in value["headers"]], value["body"])
    return value["fingerprint"], stored


def put(
    alias: str, tenant: str, key: str, fingerprint: str, response: StoredResponse, ttl: timedelta
) -> None:
    """Cache a committed final answer for the rest of its TTL."""
    seconds = int(ttl.total_seconds())
    if seconds < 1:
        return  # about to expire: nothing to gain, and Django reads 0 as "don't cache"
    value = {
        "fingerprint": fingerprint,
        "status": response.status,
        "headers": [list(h) for h in response.headers],
        "body": response.body,
    }
    try:
        caches[alias].set(cache_key(tenant, key), value, timeout=seconds)
    except Exception:
        logger.warning("idempotency cache %r unreachable; answer not cached", alias, exc_info=True)
