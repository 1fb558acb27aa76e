"""Every ``IDEMPOTENCY_*`` setting, read lazily so ``override_settings`` reaches it."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.http import HttpRequest
from django.utils.module_loading import import_string

DEFAULT_HEADER = "Idempotency-Key"
DEFAULT_TTL = timedelta(hours=24)
DEFAULT_LEASE = timedelta(seconds=60)
DEFAULT_IDLE_TIMEOUT = timedelta(minutes=5)
DEFAULT_KEY_MAX_LENGTH = 255
DEFAULT_MAX_STORED_BYTES = 1024 * 1024
DEFAULT_ENCRYPTION_KEYS = ("server-secret",)
#: About two hours of a broker refusing every publish, at the outbox's backoff.
DEFAULT_OUTBOX_MAX_ATTEMPTS = 20
DEFAULT_TENANT_RESOLVER = "idempotency_django.tenants.user_pk"
# Bounds: an expiry a century away stays inside every database's date range (SQLite
# turns one past 9999 into NULL); PostgreSQL takes lock and idle timeouts as int ms.
MAX_TTL = timedelta(days=36_500)
MAX_WAIT = timedelta(days=1)

TenantResolver = Callable[[HttpRequest], str]


def as_timedelta(value: Any) -> timedelta:
    """Seconds (int/float) or a ``timedelta``: ``TypeError`` otherwise, ``ValueError`` if
    not finite or beyond ``timedelta``'s range."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ValueError(f"expected a finite number of seconds, got {value!r}")
        try:
            return timedelta(seconds=value)
        except OverflowError:
            raise ValueError(f"{value!r} seconds is out of range") from None
    raise TypeError(f"expected seconds or a timedelta, got {value!r}")


def bounded(value: Any, maximum: timedelta, *, zero: bool = False) -> timedelta:
    """``as_timedelta(value)``, positive (or zero, if ``zero``) and at most ``maximum``."""
    duration = as_timedelta(value)
    if duration < timedelta(0) or (duration == timedelta(0) and not zero):
        raise ValueError(f"expected a {'non-negative' if zero else 'positive'} duration")
    if duration > maximum:
        raise ValueError(f"expected at most {maximum.days} days")
    return duration


class Settings:
    """Typed, lazy access to the app's settings; one property per setting."""

    @property
    def HEADER(self) -> str:
        return str(getattr(settings, "IDEMPOTENCY_HEADER", DEFAULT_HEADER))

    @property
    def REQUIRED(self) -> bool:
        return bool(getattr(settings, "IDEMPOTENCY_REQUIRED", True))

    @property
    def TTL(self) -> timedelta:
        return as_timedelta(getattr(settings, "IDEMPOTENCY_TTL", DEFAULT_TTL))

    @property
    def LEASE(self) -> timedelta:
        return as_timedelta(getattr(settings, "IDEMPOTENCY_LEASE", DEFAULT_LEASE))

    @property
    def TENANT_RESOLVER(self) -> TenantResolver:
        """A dotted path or the callable itself."""
        value = getattr(settings, "IDEMPOTENCY_TENANT_RESOLVER", DEFAULT_TENANT_RESOLVER)
        resolver: TenantResolver = import_string(value) if isinstance(value, str) else value
        return resolver

    @property
    def PROTOCOL(self) -> str | None:
        """``"lock"`` or ``"lease"``; ``None``: lock on PostgreSQL, lease elsewhere."""
        value = getattr(settings, "IDEMPOTENCY_PROTOCOL", None)
        return None if value is None else str(value)

    @property
    def IDLE_TIMEOUT(self) -> timedelta | None:
        """How long PostgreSQL lets a protected view's transaction sit idle; None: no bound."""
        value = getattr(settings, "IDEMPOTENCY_IDLE_TIMEOUT", DEFAULT_IDLE_TIMEOUT)
        return None if value is None else as_timedelta(value)

    @property
    def WAIT(self) -> float:
        """Seconds a duplicate waits for an in-flight original's answer before 409."""
        value = getattr(settings, "IDEMPOTENCY_WAIT", 0)
        return as_timedelta(value).total_seconds()

    @property
    def KEY_MAX_LENGTH(self) -> int:
        return int(getattr(settings, "IDEMPOTENCY_KEY_MAX_LENGTH", DEFAULT_KEY_MAX_LENGTH))

    @property
    def CACHE(self) -> str | None:
        alias = getattr(settings, "IDEMPOTENCY_CACHE", None)
        return None if alias is None else str(alias)

    @property
    def SECRET(self) -> str | None:
        """The server secret (see ``secret.py``); ``None``: persisted per entries database."""
        value = getattr(settings, "IDEMPOTENCY_SECRET", None)
        return None if value is None else str(value)

    @property
    def SECRET_FALLBACKS(self) -> list[str]:
        """Earlier roots of the seal, newest first: opening only (``secret.settings_roots``)."""
        return [str(value) for value in getattr(settings, "IDEMPOTENCY_SECRET_FALLBACKS", ())]

    @property
    def ERROR_FORMAT(self) -> str:
        return str(getattr(settings, "IDEMPOTENCY_DRF_ERROR_FORMAT", "problem"))

    @property
    def OUTBOX_MAX_ATTEMPTS(self) -> int | None:
        """Failed publishes after which an outbox row is dead-lettered; ``None``: never."""
        value = getattr(settings, "IDEMPOTENCY_OUTBOX_MAX_ATTEMPTS", DEFAULT_OUTBOX_MAX_ATTEMPTS)
        return None if value is None else int(value)

    @property
    def PREPARED_STATEMENTS(self) -> bool | None:
        """``None``: on, except for a database with ``DISABLE_SERVER_SIDE_CURSORS``."""
        value = getattr(settings, "IDEMPOTENCY_PREPARED_STATEMENTS", None)
        return None if value is None else bool(value)

    @property
    def ENCRYPTION_KEYS(self) -> list[str]:
        """Newest first: urlsafe base64 of 32 bytes, or ``"server-secret"`` (derived)."""
        value = getattr(settings, "IDEMPOTENCY_ENCRYPTION_KEYS", DEFAULT_ENCRYPTION_KEYS)
        return [str(entry) for entry in value]

    @property
    def MAX_STORED_BYTES(self) -> int:
        """The most a stored answer's headers and body may take, in bytes."""
        return int(getattr(settings, "IDEMPOTENCY_MAX_STORED_BYTES", DEFAULT_MAX_STORED_BYTES))

    @property
    def OPEN_LEGACY_ROWS(self) -> bool:
        """Whether replays open 0.4's seals and 0.3's plain rows (an upgrade window only)."""
        return getattr(settings, "IDEMPOTENCY_OPEN_LEGACY_ROWS", False) is True

    @property
    def REDACT(self) -> Any:
        """What may be stored for replays: a callable, its dotted path, or JSON field paths."""
        value = getattr(settings, "IDEMPOTENCY_REDACT", None)
        return import_string(value) if isinstance(value, str) else value

    @property
    def CONFORMANCE_HOOKS(self) -> bool:
        """Whether ``conformance_hooks`` obey their request headers (never in production)."""
        return getattr(settings, "IDEMPOTENCY_CONFORMANCE_HOOKS", False) is True


conf = Settings()

# What is computed from settings once, not per request (a policy, HMAC keys):
# forgotten whenever a setting changes (override_settings, the test client's settings).
_compiled: list[Callable[[], None]] = []
generation = 0  # bumped on every setting change: a compiled value records the one it saw


def compiled(clear: Callable[[], None]) -> None:
    """Register ``clear``: called whenever a setting changes."""
    _compiled.append(clear)


def settings_changed(**kwargs: Any) -> None:
    global generation
    generation += 1
    for clear in _compiled:
        clear()


setting_changed.connect(settings_changed, dispatch_uid="idempotency_django.conf.compiled")
