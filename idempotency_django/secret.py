"""The server secret: what derived keys, advisory-lock ids and key digests are keyed with.

It must never change while a retry can still come: a derived key handed to a
payment provider, or a lock id two servers share, has to be the same on the
retry as on the first try. So it is not ``SECRET_KEY`` (which is rotated) but
``IDEMPOTENCY_SECRET`` or, when that is unset, a value persisted once per
entries database (:class:`~idempotency_django.models.IdempotencySecret`).

The persisted value is derived from the oldest of ``SECRET_KEY_FALLBACKS`` and
``SECRET_KEY`` exactly as 0.2.0's ``derive_key()`` keyed itself: an upgrade
keeps every derived key, a later rotation or dropped fallback changes nothing
(the row is read, not recomputed), and a flushed test database re-creates the
same value.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.db import OperationalError, connections, router, transaction
from django.dispatch import receiver
from django.utils.encoding import force_bytes

from idempotency_django.conf import conf
from idempotency_django.databases import default_alias

_SEED = b"idempotency_django.derive"
_ROW = 1
_cache: dict[str, bytes] = {}
_CACHE = "\x00cache"  # no database alias is spelt so
_WATCHED = frozenset({"SECRET_KEY", "SECRET_KEY_FALLBACKS", "IDEMPOTENCY_SECRET"})


def server_secret(using: str | None = None) -> bytes:
    """The 32-byte secret for the entries database ``using`` (read once per process)."""
    alias = using or default_alias()
    found = _cache.get(alias)
    if found is None:
        found = _load(alias)
    return found


def derive_key(tenant: str, key: str, namespace: str, using: str | None = None) -> str:
    """A key for an outside service: stable per (tenant, key, namespace), never the key itself.

    HMAC-SHA256 under the server secret of the entries database ``using``
    (``IDEMPOTENCY_SECRET``, else the value persisted there),
    never under ``SECRET_KEY`` itself: rotating ``SECRET_KEY`` or dropping a fallback
    must not change the key a retry hands the provider.
    """
    message = json.dumps([tenant, key, namespace], ensure_ascii=False)
    secret = server_secret(using)
    return hmac.new(secret, message.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()


def seed_from_settings() -> bytes:
    """What the secret is when first persisted (and what ``IDEMPOTENCY_SECRET`` gives)."""
    configured = conf.SECRET
    if configured is not None:
        return hashlib.sha256(_SEED + force_bytes(configured)).digest()
    # 0.2.0's derive_key(): the oldest configured key (Django's rotation puts the
    # previous one first in the fallbacks, so the oldest is last).
    fallbacks = list(getattr(settings, "SECRET_KEY_FALLBACKS", ()))
    return hashlib.sha256(
        _SEED + force_bytes(fallbacks[-1] if fallbacks else settings.SECRET_KEY)
    ).digest()


def lock_id(using: str, tenant: str, key: str) -> int:
    """The advisory-lock id of (tenant, key): a keyed 64-bit value, signed as PostgreSQL's bigint.

    Keyed so that nobody can compute another key with the same id (an unkeyed hash
    can be inverted and a victim's key held busy from another tenant).
    """
    message = f"{tenant}\x1f{key}".encode("utf-8", "surrogatepass")
    mac = hmac.digest(_subkey(server_secret(using), b"lock"), message, "sha256")
    return int.from_bytes(mac[:8], "big", signed=True)


def cache_secret() -> bytes:
    """The key of the replay cache's names: this project's own namespace in a shared cache.

    From settings alone, like ``signals.key_digest``'s: a cache lookup comes before any
    database statement, and a ``SECRET_KEY`` rotation only costs cache misses (the
    database still holds every answer).
    """
    return _from_settings(_CACHE, b"cache")


def _from_settings(slot: str, purpose: bytes) -> bytes:
    found = _cache.get(slot)
    if found is None:
        configured = conf.SECRET
        source = force_bytes(settings.SECRET_KEY if configured is None else configured)
        found = _cache[slot] = _settings_key(source, purpose)
    return found


@functools.lru_cache(maxsize=8)
def _settings_key(source: bytes, purpose: bytes) -> bytes:
    return _subkey(hashlib.sha256(_SEED + source).digest(), purpose)


@functools.lru_cache(maxsize=8)
def _subkey(secret: bytes, purpose: bytes) -> bytes:
    return hmac.new(secret, b"idempotency_django." + purpose, hashlib.sha256).digest()


def _load(alias: str) -> bytes:
    """Read (first: persist) the secret in a transaction of its own, and keep it.

    Never in a caller's transaction (a view's under ``ATOMIC_REQUESTS``, a
    ``transaction.atomic()`` block): a rollback there would take back the row
    while this process keeps using the value, and a server started after a
    ``SECRET_KEY`` rotation would persist another one (another derived key for a
    retry). So inside one it is read on a connection of its own, in autocommit.
    SQLite has one writer, which that transaction may be (and a caller's
    transaction may hold the row's lock itself): there a row found is kept at once,
    and a row written in that transaction only once it commits (after a rollback it
    is read again).
    """
    conn = connections[alias]
    if conf.SECRET is not None:
        found = seed_from_settings()
    elif not conn.in_atomic_block:
        found, _written = _read_or_persist(alias)
    else:
        apart = _apart(alias) if conn.vendor in _APART else None
        if apart is None:
            found, written = _read_or_persist(alias)
            if written:
                keep = functools.partial(_cache.__setitem__, alias, found)
                transaction.on_commit(keep, alias)
                return found
        else:
            found = apart
    _cache[alias] = found
    return found


# Per vendor: bounds a wait on the row that the caller's own transaction could hold.
_APART = {
    "postgresql": "SET lock_timeout = '2s'",
    "mysql": "SET innodb_lock_wait_timeout = 2",
}


def _apart(alias: str) -> bytes | None:
    """:func:`_read_or_persist` on a new connection to ``alias``, in autocommit.

    ``None`` when it waited on a lock (the caller's transaction holds the row).
    """
    outer = connections[alias]
    own = connections.create_connection(alias)
    connections[alias] = own
    try:
        with own.cursor() as cursor:
            cursor.execute(_APART[own.vendor])
        return _read_or_persist(alias)[0]
    except OperationalError:
        return None
    finally:
        connections[alias] = outer
        own.close()


def _read_or_persist(alias: str) -> tuple[bytes, bool]:
    """The stored secret, and whether this call wrote it."""
    from idempotency_django.models import IdempotencySecret

    rows = IdempotencySecret.objects.using(alias)
    stored = rows.filter(pk=_ROW).values_list("value", flat=True).first()
    if stored is not None:
        return bytes.fromhex(stored), False
    ensure_row(alias)
    return bytes.fromhex(rows.filter(pk=_ROW).values_list("value", flat=True).get()), True


def ensure_row(alias: str) -> None:
    """Persist the secret on ``alias`` unless a row is there (a concurrent insert wins)."""
    from idempotency_django.models import IdempotencySecret

    row = IdempotencySecret(pk=_ROW, value=seed_from_settings().hex())
    IdempotencySecret.objects.using(alias).bulk_create([row], ignore_conflicts=True)


def on_post_migrate(using: str = "default", **kwargs: Any) -> None:
    """Persist the secret as soon as the table exists (in autocommit, outside any request)."""
    from idempotency_django.models import IdempotencySecret

    if conf.SECRET is None and router.allow_migrate_model(using, IdempotencySecret):
        ensure_row(using)


@receiver(setting_changed)
def _forget(setting: str, **kwargs: Any) -> None:
    if setting in _WATCHED:
        _cache.clear()


__all__ = ["cache_secret", "derive_key", "lock_id", "seed_from_settings", "server_secret"]
