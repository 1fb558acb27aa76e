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

Two more values live here, for the stored answers' seal (see :mod:`.seal`):

- :func:`settings_roots`: the default sealing key's roots, from settings alone
  (``IDEMPOTENCY_SECRET``, else ``SECRET_KEY`` and its fallbacks), never from a
  database: a backup, a replica or a dump holds no key that opens its answers;
- :func:`database_identity`: what the entries database's server knows it by (its OID
  and cluster on PostgreSQL), bound with a random, non-secret value persisted once in
  it, so that a row copied into another database (a clone's included) does not open
  there.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import os
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.db import OperationalError, connections, router, transaction
from django.dispatch import receiver
from django.utils.encoding import force_bytes

from idempotency_django._conf import conf
from idempotency_django.databases import default_alias, server_identity

_SEED = b"idempotency_django.derive"
_ROW = 1
_cache: dict[str, bytes] = {}
_CACHE = "\x00cache"  # no database alias is spelt so
_IDENTITY = "\x00identity "  # + alias
_SERVER = "\x00server "  # + alias
_SECRET_ROW, _IDENTITY_ROW = "secret", "identity"
_WATCHED = frozenset(
    {"SECRET_KEY", "SECRET_KEY_FALLBACKS", "IDEMPOTENCY_SECRET", "IDEMPOTENCY_SECRET_FALLBACKS"}
)


def server_secret(using: str | None = None) -> bytes:
    """The 32-byte secret for the entries database ``using`` (read once per process)."""
    alias = using or default_alias()
    found = _cache.get(alias)
    if found is None:
        found = _load(alias, _SECRET_ROW)
        if conf.SECRET is None:
            # The database was read: the identity with it, once per process, so that a
            # later request (or a count of its statements) never meets its first read.
            database_identity(alias)
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
    """The key of the replay cache's names and values: this project's own namespace.

    From settings alone (the newest of :func:`settings_roots`): a ``SECRET_KEY``
    rotation only costs cache misses (the database still holds every answer). The
    names also carry the database's identity (``cache.cache_key``).
    """
    found = _cache.get(_CACHE)
    if found is None:
        found = _cache[_CACHE] = _subkey(settings_roots()[0], b"cache")
    return found


def settings_roots() -> list[bytes]:
    """Roots of keys no database holds, newest first: ``IDEMPOTENCY_SECRET``'s, else
    ``SECRET_KEY``'s then each of ``SECRET_KEY_FALLBACKS``' (so that a rotation keeps
    what the old key sealed readable while it is a fallback); then each of
    ``IDEMPOTENCY_SECRET_FALLBACKS``' (the strings that were the root before: moving
    from ``SECRET_KEY`` to ``IDEMPOTENCY_SECRET`` lists the old ``SECRET_KEY`` there).

    An HMAC keyed by the setting itself, never ``sha256(seed + setting)``: that is
    what the persisted secret row holds (:func:`seed_from_settings`).
    """
    configured = conf.SECRET
    if configured is not None:
        sources = [configured]
    else:
        sources = [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", ())]
    return [_root(force_bytes(source)) for source in (*sources, *conf.SECRET_FALLBACKS)]


@functools.lru_cache(maxsize=16)
def _root(source: bytes) -> bytes:
    return hmac.new(source, b"idempotency_django.root", hashlib.sha256).digest()


def database_identity(using: str) -> bytes:
    """The entries database ``using``'s identity: what its server knows it by
    (:func:`~idempotency_django.databases.server_identity`), bound with its row.

    The server's part is asked, never stored: a ``CREATE DATABASE … TEMPLATE`` clone
    or a dump restored as another database carries the row, not the server's part, and
    a table writer can copy the row with an answer, not the server's part. The row
    keeps two databases the server can't tell apart (SQLite files at one path on two
    machines, MySQL databases of one name on two servers) apart, unless one is a copy.
    """
    row = row_identity(using)
    server = _cache.get(_SERVER + using)
    if server is None:
        server = _cache[_SERVER + using] = server_identity(using)
    return _bound_identity(server, row)


@functools.lru_cache(maxsize=16)
def _bound_identity(server: bytes, row: bytes) -> bytes:
    return hmac.new(row, b"idempotency_django.identity" + server, hashlib.sha256).digest()


def row_identity(using: str) -> bytes:
    """The identity row's 16 random bytes, persisted once in the entries database
    ``using``: 0.5's whole identity (its seals, version 2, are bound to it alone)."""
    found = _cache.get(_IDENTITY + using)
    if found is None:
        found = _load(using, _IDENTITY_ROW)
    return found


@functools.lru_cache(maxsize=8)
def _subkey(secret: bytes, purpose: bytes) -> bytes:
    return hmac.new(secret, b"idempotency_django." + purpose, hashlib.sha256).digest()


def _load(alias: str, which: str) -> bytes:
    """Read (first: persist) the secret (or the identity) in a transaction of its own.

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
    conn, slot = connections[alias], alias if which == _SECRET_ROW else _IDENTITY + alias
    if which == _SECRET_ROW and conf.SECRET is not None:
        found = seed_from_settings()
    elif not conn.in_atomic_block:
        found, _written = _read_or_persist(alias, which)
    else:
        apart = _apart(alias, which) if conn.vendor in _APART else None
        if apart is None:
            found, written = _read_or_persist(alias, which)
            if written:
                keep = functools.partial(_cache.__setitem__, slot, found)
                transaction.on_commit(keep, alias)
                return found
        else:
            found = apart
    _cache[slot] = found
    return found


# Per vendor: bounds a wait on the row that the caller's own transaction could hold.
_APART = {
    "postgresql": "SET lock_timeout = '2s'",
    "mysql": "SET innodb_lock_wait_timeout = 2",
}


def _apart(alias: str, which: str) -> bytes | None:
    """:func:`_read_or_persist` on a new connection to ``alias``, in autocommit.

    ``None`` when it waited on a lock (the caller's transaction holds the row).
    """
    outer = connections[alias]
    own = connections.create_connection(alias)
    connections[alias] = own
    try:
        with own.cursor() as cursor:
            cursor.execute(_APART[own.vendor])
        return _read_or_persist(alias, which)[0]
    except OperationalError:
        return None
    finally:
        connections[alias] = outer
        own.close()


def _read_or_persist(alias: str, which: str) -> tuple[bytes, bool]:
    """The stored value, and whether this call wrote it."""
    rows = _rows(alias, which)
    stored = rows.filter(pk=_ROW).values_list(_FIELD[which], flat=True).first()
    if stored is not None:
        return bytes.fromhex(stored), False
    ensure_row(alias, which)
    return bytes.fromhex(rows.filter(pk=_ROW).values_list(_FIELD[which], flat=True).get()), True


_FIELD = {_SECRET_ROW: "value", _IDENTITY_ROW: "identity"}


def _rows(alias: str, which: str) -> Any:
    from idempotency_django.models import IdempotencyDatabase, IdempotencySecret

    model = IdempotencySecret if which == _SECRET_ROW else IdempotencyDatabase
    return model.objects.using(alias)


def ensure_row(alias: str, which: str = _SECRET_ROW) -> None:
    """Persist the value on ``alias`` unless a row is there (a concurrent insert wins)."""
    rows = _rows(alias, which)
    # The secret: settings' function, so a flushed test database gets it back. The
    # identity: random, the one thing two databases never share; after a flush (a
    # test database) the one this process already uses, so that it stays the same.
    if which == _SECRET_ROW:
        value = seed_from_settings().hex()
    else:
        value = _cache.get(_IDENTITY + alias, os.urandom(16)).hex()
    rows.bulk_create([rows.model(pk=_ROW, **{_FIELD[which]: value})], ignore_conflicts=True)


def on_post_migrate(using: str = "default", **kwargs: Any) -> None:
    """Persist the secret and the identity as soon as their tables exist (in autocommit).

    Also after a ``flush`` (which sends ``post_migrate``): the identity this process
    read before it is written back, so that it and every other process agree.
    """
    from idempotency_django.models import IdempotencyDatabase, IdempotencySecret

    if conf.SECRET is None and router.allow_migrate_model(using, IdempotencySecret):
        ensure_row(using)
    if router.allow_migrate_model(using, IdempotencyDatabase):
        ensure_row(using, _IDENTITY_ROW)


@receiver(setting_changed)
def _forget(setting: str, **kwargs: Any) -> None:
    if setting in _WATCHED:
        _cache.clear()


__all__ = [
    "cache_secret",
    "database_identity",
    "derive_key",
    "lock_id",
    "row_identity",
    "seed_from_settings",
    "server_secret",
    "settings_roots",
]
