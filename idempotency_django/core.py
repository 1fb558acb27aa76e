"""The protocol, independent of any view framework: claim, execute, record, replay.

Adapters (``decorators``, ``rest_framework``) call :func:`protect` with the
request and a zero-argument callable that runs the view; everything that makes
a request idempotent happens here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime

from django.db import InterfaceError, OperationalError, transaction
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from idempotency_django import cache, store
from idempotency_django.exceptions import (
    IdempotencyError,
    KeyMissing,
    KeyReused,
    RequestInProgress,
    StoreUnavailable,
)
from idempotency_django.keys import derive_key, parse_key
from idempotency_django.models import IdempotencyEntry
from idempotency_django.options import SAFE_METHODS, Options, Policy
from idempotency_django.responses import StoredResponse, is_final, require_plain

logger = logging.getLogger("idempotency_django")
ViewCall = Callable[[], HttpResponse]
_CLAIM_ATTEMPTS = 3
TENANT_MAX_LENGTH = IdempotencyEntry._meta.get_field("tenant").max_length or 255


def now() -> datetime:
    """The clock every lease and expiry is measured with (patched by tests)."""
    return timezone.now()


@dataclass
class IdempotencyContext:
    """``request.idempotency``: what a protected view knows about its key."""

    key: str
    tenant: str
    replayed: bool = False
    _fingerprint: str = field(default="", repr=False)

    def derive(self, namespace: str) -> str:
        """A key for an outside service (e.g. a payment provider's Idempotency-Key)."""
        return derive_key(self.tenant, self.key, namespace)


def applies(request: HttpRequest, options: Options) -> bool:
    """Whether this request is protected at all: unsafe and one of the view's methods."""
    method = (request.method or "").upper()
    return method not in SAFE_METHODS and method in options.methods


def protect(
    request: HttpRequest, policy: Policy, tenant_of: Callable[[], object], call_view: ViewCall
) -> HttpResponse:
    """Answer ``request`` idempotently; raises ``IdempotencyError`` for client errors.

    ``request`` is the Django request (its key and fingerprint are read from it);
    ``tenant_of()`` resolves the tenant, called once the adapter has authenticated.
    """
    with store_errors():  # a resolver may load the session's user from the database
        tenant = tenant_of()
    key = extract_key(request, policy)
    if key is None:
        return call_view()
    context = IdempotencyContext(
        key, check_tenant(tenant), _fingerprint=policy.fingerprint(request)
    )
    request.idempotency = context  # type: ignore[attr-defined]
    return run(context, policy, call_view)


def extract_key(request: HttpRequest, policy: Policy) -> str | None:
    """The parsed key; ``None`` if absent and optional; raises when absent and required."""
    raw = policy.key(request) if policy.key else request.headers.get(policy.header)
    if raw is None:
        if policy.required:
            where = "an idempotency key" if policy.key else f"the {policy.header} header"
            raise KeyMissing(f"This endpoint requires {where}.")
        return None
    if not isinstance(raw, str | bytes):
        raise TypeError(f"The idempotency key extractor must return str or None, got {raw!r}.")
    return parse_key(raw, policy.key_max_length)


def check_tenant(tenant: object) -> str:
    """The resolver's answer, if it is one the entries' column can hold."""
    if not isinstance(tenant, str):
        raise TypeError(f"The idempotency tenant resolver must return a str, got {tenant!r}.")
    if len(tenant) > TENANT_MAX_LENGTH:
        raise ValueError(f"The idempotency tenant is longer than {TENANT_MAX_LENGTH} characters.")
    return tenant


def run(context: IdempotencyContext, policy: Policy, call_view: ViewCall) -> HttpResponse:
    """Replay a final answer, or claim the key and execute the view once."""
    cached = _from_cache(context, policy)
    if cached is not None:
        return _replay(context, cached)
    outcome = _acquire(context, policy)
    if isinstance(outcome, StoredResponse):
        return _replay(context, outcome)
    return _execute(context, outcome, policy, call_view)


def _from_cache(context: IdempotencyContext, policy: Policy) -> StoredResponse | None:
    if policy.cache is None:
        return None
    hit = cache.get(policy.cache, context.tenant, context.key)
    if hit is None:
        return None
    fingerprint, stored = hit
    if fingerprint != context._fingerprint:
        raise KeyReused()
    return stored


def _acquire(context: IdempotencyContext, policy: Policy) -> store.Claim | StoredResponse:
    """A claim of our own, or the final answer to replay; raises 409/422/503."""
    for _ in range(_CLAIM_ATTEMPTS):
        started = now()
        args = (policy.database, context.tenant, context.key, context._fingerprint, started)
        with store_errors():
            found = store.claim(*args, policy.lease, policy.ttl)
            if isinstance(found, store.Existing) and found.is_dead(started):
                found = store.take_over(*args, policy.lease, policy.ttl)
        if isinstance(found, store.Claim):
            return found
        if isinstance(found, store.Existing):
            answer = _decide(context, found)
            _refill_cache(context, policy, found)
            return answer
        # None: the row changed under us (committed, deleted or held); look again.
    raise RequestInProgress()


def _decide(context: IdempotencyContext, existing: store.Existing) -> StoredResponse:
    if existing.fingerprint != context._fingerprint:
        raise KeyReused()
    if existing.response is None:
        raise RequestInProgress()
    return existing.response


def _refill_cache(context: IdempotencyContext, policy: Policy, existing: store.Existing) -> None:
    """Put an answer replayed from the database back into the cache (evicted, or Redis restarted)."""
    if existing.response is not None:
        _cache_on_commit(
            context, policy, existing.fingerprint, existing.response, existing.expires_at
        )


def _cache_on_commit(
    context: IdempotencyContext,
    policy: Policy,
    fingerprint: str,
    answer: StoredResponse,
    expires_at: datetime,
) -> None:
    """Cache ``answer`` once the transaction commits, until the entry itself expires."""
    if policy.cache is None:
        return
    alias = policy.cache
    # The time left is measured when the callback runs: on_commit hooks registered
    # before it (the view's own) may take a while, and the cache must never outlive
    # the entry. Runs at once in autocommit.
    transaction.on_commit(
        lambda: cache.put(
            alias, context.tenant, context.key, fingerprint, answer, expires_at - now()
        ),
        using=policy.database,
    )


def _execute(
    context: IdempotencyContext, claim: store.Claim, policy: Policy, call_view: ViewCall
) -> HttpResponse:
    try:
        with transaction.atomic(using=claim.using):
            _lock(claim, policy)
            response = require_plain(call_view())
            if not is_final(response.status_code):
                raise _Discard(response)
            _record(context, claim, policy, response)
    except _Discard as discard:
        _release(claim)
        return discard.response
    except BaseException:
        _release(claim)
        raise
    return response


def _lock(claim: store.Claim, policy: Policy) -> None:
    with store_errors():
        held = store.lock(claim, now(), policy.lease)
    if not held:
        # Taken over between our claim and our lock: the other request runs it.
        raise RequestInProgress()


def _record(
    context: IdempotencyContext, claim: store.Claim, policy: Policy, response: HttpResponse
) -> None:
    stored = StoredResponse.from_response(response)
    status = (
        IdempotencyEntry.Status.COMPLETED
        if response.status_code < 400
        else IdempotencyEntry.Status.FAILED_FINAL
    )
    recorded_at = now()
    if not store.record(claim, status, stored, recorded_at, policy.ttl):
        raise RuntimeError("idempotency claim lost while its row lock was held")
    _cache_on_commit(context, policy, context._fingerprint, stored, recorded_at + policy.ttl)


def _release(claim: store.Claim) -> None:
    try:
        store.release(claim)
    except (OperationalError, InterfaceError):
        # The lease frees the key once it passes; nothing committed meanwhile.
        logger.warning(
            "could not release idempotency claim %s; its lease will expire",
            claim.key,
            exc_info=True,
        )


def _replay(context: IdempotencyContext, stored: StoredResponse) -> HttpResponse:
    context.replayed = True
    return stored.to_response()


class _Discard(Exception):
    """Leaves the atomic block so the view's writes roll back, keeping its response."""

    def __init__(self, response: HttpResponse) -> None:
        super().__init__(response.status_code)
        self.response = response


@contextmanager
def store_errors() -> Iterator[None]:
    """Database errors while protecting a request become a 503: nothing ran."""
    try:
        yield
    except (OperationalError, InterfaceError) as exc:
        logger.error("idempotency store unreachable: %s", exc)
        raise StoreUnavailable() from exc


__all__ = [
    "IdempotencyContext",
    "IdempotencyError",
    "applies",
    "now",
    "protect",
    "run",
    "store_errors",
]
