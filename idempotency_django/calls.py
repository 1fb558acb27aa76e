"""Idempotency beyond views: webhook processing, queue consumers, Celery tasks.

The same table, protocols, TTL and guarantees as the views: the body's writes
and its recorded result commit together, once. Keys live in their own
namespace (``scope``): stored as ``scope + "\\x1f" + key``, which no HTTP key
can spell (a header key is visible ASCII), so a task key never meets a view key.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ParamSpec, TypeVar

from idempotency_django import databases, signals
from idempotency_django._conf import as_timedelta, conf
from idempotency_django._protocol.execution import Guard, Run, claimed
from idempotency_django._protocol.fingerprint import (
    arguments_digest,
    bound_arguments,
    keyed,
    signature_of,
)
from idempotency_django._protocol.keys import SEPARATOR
from idempotency_django._protocol.options import check_options, protocol_for
from idempotency_django._protocol.responses import StoredResponse
from idempotency_django._storage.secret import derive_key
from idempotency_django._storage.serializers import JSONSerializer, Serializer
from idempotency_django._storage.store.sql import Target
from idempotency_django.exceptions import IdempotencyError, NestedRefusal
from idempotency_django.models import IdempotencyEntry

P = ParamSpec("P")
R = TypeVar("R")
_KEY_MAX = IdempotencyEntry._meta.get_field("key").max_length or 255


@dataclass
class IdempotentCall:
    """What the body of :func:`idempotent_call` knows, and where it leaves its result."""

    key: str
    tenant: str
    scope: str
    replayed: bool = False
    result: Any = None
    #: Whether the body derived a key for an outside service: if it then fails, that
    #: service may have acted (an uncertain outcome, see :mod:`.consumers`).
    derived: bool = False
    _namespaced: str = field(default="", repr=False)
    _using: str | None = field(default=None, repr=False)

    def derive(self, namespace: str) -> str:
        """A key for an outside service: stable per (scope, tenant, key, namespace)."""
        self.derived = True
        return derive_key(self.tenant, self._namespaced, namespace, self._using)


@contextmanager
def idempotent_call(
    key: str,
    *,
    scope: str,
    tenant: str = "",
    arguments: object = None,
    ttl: float | timedelta | None = None,
    database: str | None = None,
    protocol: str | None = None,
    wait: float | timedelta | None = None,
    serializer: Serializer | None = None,
    origin: str = "call",
    guard: Guard | None = None,
) -> Iterator[IdempotentCall]:
    """Run the ``with`` body at most once per (scope, tenant, key); see the module docstring.

    On a finished duplicate ``call.replayed`` is true and ``call.result`` holds
    the stored result: the body must then return it without doing the work.
    Raises ``KeyReused`` (other ``arguments``), ``RequestInProgress`` (another
    execution holds the key, after waiting ``wait`` seconds) or
    ``StoreUnavailable``; an ``IdempotencyError`` raised by the body (a nested
    call refused) comes out as ``NestedRefusal``, never as this call's own. ``origin`` names the caller in signals (``"task"``).
    ``guard`` (an :class:`~._protocol.execution.Guard`) is told when the claim is
    this call's and when its body failed while still holding it (the consumers' count).
    """
    check_options("idempotent_call", ttl=ttl, wait=wait, protocol=protocol)
    using = database or databases.default_alias()
    call = IdempotentCall(key, tenant, scope, _namespaced=namespaced(scope, key), _using=using)
    fingerprint = keyed(arguments_digest(arguments))
    target = Target(
        using,
        tenant,
        call._namespaced,
        fingerprint.current,
        conf.LEASE,
        _ttl(ttl),
        conf.IDLE_TIMEOUT,
    )
    codec = serializer or JSONSerializer()
    chosen = protocol_for(using, protocol or conf.PROTOCOL)
    seen = signals.Observation(origin, key_digest=signals.key_digest(tenant, call._namespaced))
    seen.slot = Run(chosen, guard=guard)
    try:
        # Inside a protected view on another database, this call's writes are
        # covered by its own key: not the view's uncovered writes.
        with (
            databases.uncovered(using),
            claimed(target, chosen, _wait(wait), fingerprint.matches, seen.slot) as run,
        ):
            if run.replay is not None:
                seen.replayed("database")
                call.replayed, call.result = True, codec.loads(run.replay.body)
            try:
                yield call
            except IdempotencyError as inner:
                # A nested call's refusal (its key busy or reused), never this call's:
                # the body failed, as it does in a view (rolled back, key freed).
                raise NestedRefusal(inner) from inner
            if not call.replayed:
                body = codec.dumps(call.result)
                run.record(IdempotencyEntry.Status.COMPLETED, StoredResponse(200, _JSON, body))
        if not call.replayed:
            seen.executed(stored=True)  # committed: a failed commit raised instead
    except IdempotencyError as error:
        seen.refused(error)
        raise
    except BaseException:
        seen.raised()
        raise
    finally:
        seen.send()


def idempotent_function(
    *,
    key: Callable[..., str],
    scope: str | None = None,
    tenant: Callable[..., str] | str = "",
    ttl: float | timedelta | None = None,
    database: str | None = None,
    protocol: str | None = None,
    wait: float | timedelta | None = None,
    serializer: Serializer | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a function so that it runs at most once per key; duplicates get its result.

    ``key`` (and ``tenant``, if callable) are called with the function's
    arguments, e.g. ``key=lambda order_id, **_: f"order-{order_id}"``; the
    arguments are fingerprinted (another payload under one key is ``KeyReused``).
    """
    if not callable(key):
        raise TypeError("@idempotent_function(key=...) must be a callable of the arguments.")
    check_options("@idempotent_function", ttl=ttl, wait=wait, protocol=protocol)

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        name = scope or f"{fn.__module__}.{fn.__qualname__}"
        shape = signature_of(fn)

        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            owner = tenant(*args, **kwargs) if callable(tenant) else tenant
            with idempotent_call(
                key(*args, **kwargs),
                scope=name,
                tenant=owner,
                arguments=bound_arguments(shape, args, kwargs),
                ttl=ttl,
                database=database,
                protocol=protocol,
                wait=wait,
                serializer=serializer,
            ) as call:
                if not call.replayed:
                    call.result = fn(*args, **kwargs)
            result: R = call.result
            return result

        return wrapper

    return decorate


def namespaced(scope: str, key: str) -> str:
    """The key as stored: ``scope`` and ``key`` joined by a separator no HTTP key holds."""
    if not scope or SEPARATOR in scope:
        raise ValueError(f"An idempotency scope must be a non-empty name, got {scope!r}.")
    if not isinstance(key, str) or not key:
        raise ValueError(f"An idempotency key must be a non-empty str, got {key!r}.")
    stored = f"{scope}{SEPARATOR}{key}"
    if len(stored) > _KEY_MAX:
        raise ValueError(
            f"scope and key together must fit in {_KEY_MAX - 1} characters; "
            f"got {len(scope)} + {len(key)}. Hash a long business key first."
        )
    return stored


_JSON = [("Content-Type", "application/json")]


def _wait(value: float | timedelta | None) -> float:
    return conf.WAIT if value is None else as_timedelta(value).total_seconds()


def _ttl(value: float | timedelta | None) -> timedelta:
    return conf.TTL if value is None else as_timedelta(value)  # bounded by check_options()


# idempotent_call and idempotent_function are public from the package itself.
__all__ = ["IdempotentCall"]
