"""What the library holds for one (tenant, key): for ``manage.py inspect_idempotency``,
and, through :func:`lookup`, for callers asking what became of their key
(``GET …/keys/<key>/``, :mod:`idempotency_django.urls`; tasks; the client after giving up).

Read only, except :func:`release`, which is the admin action's rule
(:func:`idempotency_django.purge.release`). Times are judged by the database's clock.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from django.db.models.functions import Now

from idempotency_django import purge
from idempotency_django._conf import conf
from idempotency_django._protocol.options import protocol_for
from idempotency_django._protocol.redact import is_redacted
from idempotency_django._protocol.responses import StoredResponse
from idempotency_django._storage import seal
from idempotency_django._storage.store import pg
from idempotency_django._storage.store.sql import Target
from idempotency_django.calls import namespaced
from idempotency_django.databases import default_alias
from idempotency_django.models import IdempotencyEntry

# The admin's and the logs' ``[scope] key`` form of a call's or task's key (keys.readable).
_READABLE = re.compile(r"\[(?P<scope>[^\]]+)\] (?P<key>.+)", re.DOTALL)


# A 64-bit advisory lock shows in pg_locks as its two halves, objsubid 1.
_HELD = (
    "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted "
    "AND objsubid = 1 AND database = (SELECT oid FROM pg_database WHERE datname = "
    "current_database()) AND ((classid::bigint << 32) | objid::bigint) = {lock_id})"
)


@dataclass(frozen=True)
class Found:
    """An entry, with the database's time when it was read."""

    entry: IdempotencyEntry
    now: datetime

    @property
    def expired(self) -> bool:
        return self.entry.expires_at <= self.now

    @property
    def lease_passed(self) -> bool:
        return not self.entry.is_final and self.entry.locked_until <= self.now

    @property
    def expires_in(self) -> timedelta:
        return self.entry.expires_at - self.now


def stored_keys(key: str, scope: str | None) -> list[str]:
    """The stored keys ``key`` may mean: under ``scope``, else itself then its ``[scope] key``."""
    if scope is not None:
        return [namespaced(scope, key)]
    match = _READABLE.fullmatch(key)
    return [key, namespaced(match["scope"], match["key"])] if match else [key]


def find(tenant: str, keys: list[str], using: str) -> Found | None:
    """The first of ``keys`` held for ``tenant`` on ``using``, or ``None``."""
    rows = IdempotencyEntry.objects.using(using).filter(tenant=tenant).annotate(db_now=Now())
    for key in keys:
        entry = rows.filter(key=key).first()
        if entry is not None:
            return Found(entry, entry.db_now)
    return None


def lock_held(tenant: str, key: str, using: str) -> bool | None:
    """Whether a request holds the key's advisory lock (the lock protocol's in-flight
    request, which has no committed row); ``None`` off PostgreSQL. Read from
    ``pg_locks``, never by taking the lock: a duplicate would get a false 409."""
    conn = connections[using]
    if conn.vendor != "postgresql":
        return None
    lock_id = Target(using, tenant, key, "", timedelta(0), timedelta(0)).lock_id
    with conn.cursor() as cursor:
        cursor.execute(_HELD.format(lock_id=pg.LOCK_ID), [lock_id])
        return bool(cursor.fetchone()[0])


def protocol(found: Found | None, using: str) -> str:
    """Which protocol wrote it, as far as the entry tells (it doesn't record it)."""
    if found is not None and not found.entry.is_final:
        return "lease (only the lease protocol commits an in-progress claim)"
    try:
        configured = protocol_for(using, conf.PROTOCOL)
    except ImproperlyConfigured:  # "lock" off PostgreSQL: check E013 says so
        return "unknown"
    return f"{configured} (IDEMPOTENCY_PROTOCOL on {using!r}; a view may choose its own)"


def body_summary(entry: IdempotencyEntry) -> str:
    """``"9 bytes, application/json"``: a stored body by size and type, never its content.

    A sealed answer is described without opening it (its type is sealed too).
    """
    if entry.response_body is None:
        return "-"
    if seal.is_sealed_row(entry.response_headers):
        return f"{len(entry.response_body)} bytes, sealed"
    content_type = next(
        (v for k, v in entry.response_headers or [] if k.lower() == "content-type"), "unknown"
    )
    return f"{len(entry.response_body)} bytes, {content_type}"


def opened(entry: IdempotencyEntry, using: str) -> tuple[StoredResponse | None, str]:
    """The stored answer, opened on demand, and a note: why it can't be read, or that it was
    redacted before storing (replays don't carry what the first caller got)."""
    try:
        answer = seal.answer_of(using, entry)
    except seal.Unreadable as exc:
        return None, f"cannot be opened: {exc.why}" + (
            f" (key id {exc.key_id})" if exc.key_id else ""
        )
    if answer is None:
        return None, "no stored answer (in progress)"
    notes = ["redacted before storing"] if is_redacted(answer) else []
    if not seal.is_sealed_row(entry.response_headers):
        notes.append("stored in clear by 0.3 (reseal_idempotency seals it)")
    return answer, "; ".join(notes)


def release(found: Found) -> bool:
    """Delete the entry if it is in progress, past its lease and not held: the admin's action."""
    return purge.release([found.entry.pk], using=found.entry._state.db) == 1


# The most a lookup's Retry-After asks for, as the 409's (execution.RETRY_AFTER_MAX) is bounded.
_RETRY_AFTER_MAX = 60


@dataclass(frozen=True)
class KeyStatus:
    """What became of a (tenant, key), as :func:`lookup` and ``GET …/keys/<key>/`` tell it.

    ``status`` is ``"in_progress"``, ``"completed"`` or ``"failed_final"`` (a final
    4xx, stored and replayed like a success). A finished key has its answer's
    ``response_status``, when it was first received (``created_at``) and until when
    it is kept (``expires_at``); one in progress has ``retry_after`` seconds, and a
    ``created_at``/``expires_at`` only when its claim was committed (the lease protocol).
    """

    key: str
    status: str
    created_at: datetime | None = None
    expires_at: datetime | None = None
    response_status: int | None = None
    retry_after: int | None = None

    def as_json(self) -> dict[str, object]:
        """The JSON body of the HTTP lookup: ISO 8601 times, absent fields left out."""
        found: dict[str, object] = {"key": self.key, "status": self.status}
        for name in ("created_at", "expires_at"):
            when = getattr(self, name)
            if when is not None:
                found[name] = when.isoformat()
        if self.response_status is not None:
            found["response_status"] = self.response_status
        if self.retry_after is not None:
            found["retry_after"] = self.retry_after
        return found


def lookup(key: str, *, tenant: str, using: str | None = None) -> KeyStatus | None:
    """What became of ``key`` sent by ``tenant``: a :class:`KeyStatus`, or ``None`` when
    nothing is known (never received, rolled back, expired, or another tenant's).

    ``key`` is the key as the server stored it (a view's key, unquoted). ``using``
    defaults to the entries' database (``IDEMPOTENCY_DATABASE``). Only ``tenant``'s
    entries are ever read.
    """
    using = using or default_alias()
    found = find(tenant, [key], using)
    if found is None or found.expired:
        # A "lock" protocol request in flight has no committed row, only its lock.
        held = lock_held(tenant, key, using)
        return (
            KeyStatus(key, IdempotencyEntry.Status.IN_PROGRESS.value, retry_after=1)
            if held
            else None
        )
    entry = found.entry
    if not entry.is_final:
        left = (entry.locked_until - found.now).total_seconds()
        retry = min(_RETRY_AFTER_MAX, max(1, math.ceil(left)))
        return KeyStatus(key, entry.status, entry.created_at, entry.expires_at, None, retry)
    return KeyStatus(key, entry.status, entry.created_at, entry.expires_at, entry.response_status)


__all__ = ["KeyStatus", "lookup"]
