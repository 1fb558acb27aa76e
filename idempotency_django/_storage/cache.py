"""The optional replay cache (``IDEMPOTENCY_CACHE``): a fast path, never the truth.

Any cache error is logged and treated as a miss, so the database answers instead.
After an error the alias is left alone for ``PAUSE`` seconds (per process): a
frozen Redis then costs one socket timeout per pause, not one or two per
request, and one warning instead of a flood.

A first execution pays one GET (the miss) and nothing else: most keys are never
retried, so the answer is cached by the first replay from the database (a SET
after that replay; during a WSGI request, once the response has gone out, so
the client waits for the GET alone). On django-redis both go straight to its redis-py
client (one command each, the SET with ``PX`` so the lifetime keeps its
milliseconds), skipping the cache API's per-call layers; so does Django's own
Redis backend. Any other backend goes through Django's cache API.

Whoever can write to the cache's Redis can plant a value under the library's names
(they can list them). So a value is the library's own bytes (:func:`encode`), never
a pickle, and it is authenticated (an HMAC under a key from settings, over its name
and its bytes) before anything of it is decoded: a value that does not authenticate
is a miss, logged, and the database answers. Through the cache API the backend
itself (de)serializes, which for most backends means pickle: ``check --deploy``
says so (``idempotency_django.W087``).
"""

from __future__ import annotations

import functools
import hmac
import json
import logging
import struct
import sys
import threading
import time
import weakref
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.core.cache import BaseCache, caches
from django.core.signals import request_finished, request_started
from django.db import DatabaseError, transaction

from idempotency_django import signals
from idempotency_django._protocol.responses import StoredResponse
from idempotency_django._storage import seal
from idempotency_django._storage.seal import Sealed
from idempotency_django._storage.secret import cache_secret, database_identity
from idempotency_django.exceptions import IdempotencyError, KeyReused

logger = logging.getLogger("idempotency_django")
PAUSE = 5.0
_paused_until: dict[str, float] = {}


def cache_key(database: str, tenant: str, key: str) -> str:
    """The cache's name for the entry (``database``, ``tenant``, ``key``): the store's key space.

    The entries' database is part of it, by its identity (a value persisted in it),
    not by its alias: with a database chosen per request tenant strings repeat across
    databases (user pks start at 1 in each), and two deployments of one project
    (the same ``SECRET_KEY``, one Redis, each its own database) share alias names.
    And it is keyed with the project's own secret (``cache_secret``), so that two
    projects sharing one Redis never read each other's answers. Hashed: keys are
    client-controlled and tenants may hold anything.
    """
    identity = database_identity(database).hex()
    message = json.dumps([identity, tenant, key]).encode()
    return "idempotency:" + hmac.digest(cache_secret(), message, "sha256").hex()


def get(alias: str, database: str, tenant: str, key: str) -> tuple[str, Sealed] | None:
    """``(fingerprint, sealed answer)`` for a cached final answer, or ``None``."""
    if _paused(alias):
        return None
    try:
        name = cache_key(database, tenant, key)
    except DatabaseError:
        return None  # the identity's first read: the claim meets (and answers) that error
    try:
        value = _store(alias).get(name)
    except Exception:
        logger.warning(_UNREACHABLE, alias, "using the database", PAUSE, exc_info=True)
        _failed(alias, "get")
        return None
    if value is None:
        return None
    found = decode(name, value)
    if found is None:
        logger.warning(
            "idempotency cache value under one of our names did not authenticate (planted, "
            "truncated, or another release's): a miss, the database answers"
        )
    return found


def replay(
    alias: str, database: str, tenant: str, key: str, matches: Callable[[str], bool]
) -> StoredResponse | None:
    """The protocol's one read of the cache: the answer of (tenant, key), opened.

    ``None`` on a miss, and on a value that does not open: never the truth, the
    database's row answers (or says why it can't). Raises 422 for another payload's.
    """
    hit = get(alias, database, tenant, key)
    if hit is None:
        return None
    stored_fingerprint, sealed = hit
    if not matches(stored_fingerprint):
        raise KeyReused()
    try:
        return seal.opened(database, tenant, key, sealed)
    except seal.Unreadable as exc:
        logger.warning("idempotency cache value did not open (%s); using the database", exc.why)
        return None


def fill_on_commit(
    alias: str,
    database: str,
    tenant: str,
    key: str,
    fingerprint: str,
    answer: StoredResponse,
    lifetime: float,
) -> None:
    """The protocol's one fill: cache ``answer`` once the transaction commits, for
    ``lifetime`` seconds from now, less the time the commit takes (never past the entry's
    own expiry): a value, so the fill never calls back into the protocol."""
    sealed = _sealed_for_cache(database, tenant, key, answer)
    if sealed is None:
        return
    expires = time.monotonic() + lifetime

    def fill() -> None:
        ttl = timedelta(seconds=expires - time.monotonic())
        put(alias, database, tenant, key, fingerprint, sealed, ttl)

    transaction.on_commit(fill, using=database)


def _sealed_for_cache(
    using: str, tenant: str, key: str, answer: StoredResponse
) -> seal.Sealed | None:
    """The row's own sealed bytes (no second seal); a 0.3 row's plain answer sealed now."""
    if answer.sealed:
        return seal.Sealed(answer.status, answer.reason, answer.sealed)
    try:
        return seal.seal(using, tenant, key, answer)
    except IdempotencyError:  # over today's bound: replayed from the database only
        return None


def put(
    alias: str,
    database: str,
    tenant: str,
    key: str,
    fingerprint: str,
    response: Sealed,
    ttl: timedelta,
) -> None:
    """Cache a committed final answer for the rest of its TTL.

    During a WSGI request the write waits for the end of the request (Django's
    ``request_finished``, sent once the server has sent the response), so the
    client doesn't wait for it; elsewhere it is written at once.
    """
    if ttl.total_seconds() < 1 or _paused(alias):
        return  # about to expire, or the cache is away
    name = cache_key(database, tenant, key)
    write = _Write(alias, name, encode(name, fingerprint, response), ttl)
    deferred: list[_Write] | None = getattr(_request, "deferred", None)
    if deferred is None:
        write.send()
    else:
        deferred.append(write)


class _Write:
    """A SET to send, its lifetime counted from when it was asked for."""

    def __init__(self, alias: str, name: str, value: bytes, ttl: timedelta) -> None:
        self.alias, self.name, self.value = alias, name, value
        self.deadline = time.monotonic() + ttl.total_seconds()

    def send(self) -> None:
        milliseconds = int((self.deadline - time.monotonic()) * 1000)
        if milliseconds < 1000 or _paused(self.alias):
            return
        try:
            _store(self.alias).set(self.name, self.value, milliseconds)
        except Exception:
            logger.warning(_UNREACHABLE, self.alias, "answer not cached", PAUSE, exc_info=True)
            _failed(self.alias, "set")


# -- writes after the response -----------------------------------------------------
# Per thread: a WSGI request runs start to finish in one thread. ASGI requests
# (request_started without ``environ``) write at once.
_request = threading.local()


def _request_started(sender: object, environ: object = None, **kwargs: object) -> None:
    _flush()  # left by a request whose end this thread never saw
    _request.deferred = [] if environ is not None else None


def _request_finished(sender: object, **kwargs: object) -> None:
    _flush()


def _flush() -> None:
    deferred: list[_Write] | None = getattr(_request, "deferred", None)
    _request.deferred = None
    for write in deferred or ():
        write.send()


request_started.connect(_request_started, dispatch_uid="idempotency_django.cache.started")
request_finished.connect(_request_finished, dispatch_uid="idempotency_django.cache.finished")


# -- the stored value ---------------------------------------------------------------
# version, status, then the lengths of fingerprint, reason and the sealed answer
# (headers and body, as the entry row holds them: see :mod:`.seal`), the three, and
# last an HMAC-SHA256 over the name and all that precedes it.
_HEAD = struct.Struct(">BHHHI")
_VERSION = b"\x03"
_MAC = 32


def encode(name: str, fingerprint: str, response: Sealed) -> bytes:
    """The bytes stored under ``name`` for one answer: never a pickle."""
    fp, reason = fingerprint.encode(), response.reason.encode()
    head = _HEAD.pack(_VERSION[0], response.status, len(fp), len(reason), len(response.blob))
    body = b"".join((head, fp, reason, response.blob))
    return body + _mac(name, body)


def decode(name: str, value: object) -> tuple[str, Sealed] | None:
    """What :func:`encode` stored under ``name``; ``None`` for anything else.

    Authenticated before anything is decoded: a planted value is never parsed.
    """
    if not isinstance(value, bytes) or len(value) < _HEAD.size + _MAC:
        return None
    body, tag = value[:-_MAC], value[-_MAC:]
    if not hmac.compare_digest(tag, _mac(name, body)) or body[:1] != _VERSION:
        return None
    try:
        return _fields(body)
    except (struct.error, UnicodeDecodeError, ValueError):  # ours, so never; but a miss
        return None


def _mac(name: str, body: bytes) -> bytes:
    message = _LENGTH.pack(len(name)) + name.encode() + body
    return hmac.digest(_value_key(cache_secret()), message, "sha256")


@functools.lru_cache(maxsize=4)
def _value_key(secret: bytes) -> bytes:
    # A sub-key: the names' key never tags a value.
    return hmac.digest(secret, b"idempotency_django.cache.value", "sha256")


_LENGTH = struct.Struct(">I")


def _fields(blob: bytes) -> tuple[str, Sealed]:
    _version, status, *lengths = _HEAD.unpack_from(blob)
    fields, at = [], _HEAD.size
    for length in lengths:
        fields.append(blob[at : at + length])
        at += length
    if at != len(blob):
        raise ValueError("lengths do not add up")
    fingerprint, reason, sealed = fields
    return fingerprint.decode(), Sealed(status, reason.decode(), sealed)


# -- where it is stored ---------------------------------------------------------------


class _Generic:
    """Any Django cache backend, through the cache API (lifetimes in whole seconds)."""

    def __init__(self, backend: BaseCache) -> None:
        self.backend = backend

    def get(self, name: str) -> Any:
        return self.backend.get(name)

    def set(self, name: str, value: bytes, milliseconds: int) -> None:
        self.backend.set(name, value, timeout=milliseconds // 1000)


class _Redis:
    """A redis-py client of the backend's own: one command per call, under the backend's key.

    Bytes in, bytes out: no serializer (django-redis's and Django's both unpickle).
    """

    def __init__(self, backend: BaseCache, client: Any) -> None:
        self.backend, self.client = backend, client

    def get(self, name: str) -> Any:
        return self.client.get(self.backend.make_key(name))

    def set(self, name: str, value: bytes, milliseconds: int) -> None:
        self.client.set(self.backend.make_key(name), value, px=milliseconds)


# Per backend instance (Django's caches are per thread, and new after override_settings).
_stores: weakref.WeakKeyDictionary[BaseCache, _Generic | _Redis] = weakref.WeakKeyDictionary()


def _store(alias: str) -> _Generic | _Redis:
    backend = caches[alias]
    found = _stores.get(backend)
    if found is None:
        found = _stores[backend] = _store_for(backend)
    return found


def _store_for(backend: BaseCache) -> _Generic | _Redis:
    client = raw_client(backend)
    return _Generic(backend) if client is None else _Redis(backend, client)


def raw_client(backend: BaseCache) -> Any:
    """The backend's redis-py client for its primary, or ``None``: keep the cache API.

    django-redis's default client (one server, or a primary and its replicas: both
    reads and writes go to the primary, which is never behind) and Django's own Redis
    backend map every key to one primary. Its sharded and herd clients, and every
    other backend, keep the cache API.
    """
    module, client = type(backend).__module__, getattr(backend, "client", None)
    if module.startswith("django_redis.") and type(client).__name__ == "DefaultClient":
        return client.get_client(write=True)  # type: ignore[union-attr]
    if module == "django.core.cache.backends.redis":
        return backend._cache.get_client(write=True)  # type: ignore[attr-defined]
    return None


def _failed(alias: str, operation: str) -> None:
    _pause(alias)
    error = sys.exc_info()[1]
    signals.send(signals.cache_failed, sender=alias, alias=alias, operation=operation, error=error)


def _paused(alias: str) -> bool:
    return time.monotonic() < _paused_until.get(alias, 0.0)


def _pause(alias: str) -> None:
    _paused_until[alias] = time.monotonic() + PAUSE


_UNREACHABLE = "idempotency cache %r unreachable; %s, and it is left alone for %g s"
