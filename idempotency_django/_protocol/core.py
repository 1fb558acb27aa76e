"""The HTTP protocol, independent of any view framework: key, tenant, replay, execute.

Adapters (``decorators``, ``rest_framework``) call :func:`protect` with the
request and a zero-argument callable that runs the view; everything that makes
a request idempotent happens here and in :mod:`.execution`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth.signals import user_logged_in, user_logged_out
from django.core.exceptions import ImproperlyConfigured
from django.db import InterfaceError, OperationalError, connections, transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import resolve_url

from idempotency_django import databases, signals
from idempotency_django._conf import conf
from idempotency_django._protocol.execution import Run, claimed, settled, status_of, translate
from idempotency_django._protocol.fingerprint import Keyed, keyed
from idempotency_django._protocol.keys import extracted, parse_key
from idempotency_django._protocol.keys import form_field as form_key
from idempotency_django._protocol.options import SAFE_METHODS, Options, Policy
from idempotency_django._protocol.redact import stored_answer
from idempotency_django._protocol.responses import (
    StoredResponse,
    is_final,
    require_plain,
    shows_form_errors,
)
from idempotency_django._storage import cache
from idempotency_django._storage.secret import derive_key
from idempotency_django._storage.store.pg import IDLE_BOUND
from idempotency_django._storage.store.sql import Target
from idempotency_django.exceptions import (
    IdempotencyError,
    KeyMissing,
    NestedRefusal,
)
from idempotency_django.models import IdempotencyEntry

# Set (True) on a response whose view marked the claim's transaction for rollback
# but whose answer is final all the same (the DRF mixin's exception handler
# answering a handler's IntegrityError): the writes roll back, the answer is
# then stored in a transaction of its own. A plain view's rollback mark means
# "transient" and stores nothing.
STORE_AFTER_ROLLBACK = "_idempotency_store_after_rollback"
ViewCall = Callable[[], HttpResponse]
TenantOf = Callable[[], object]
TENANT_MAX_LENGTH = IdempotencyEntry._meta.get_field("tenant").max_length or 255


@dataclass
class IdempotencyContext:
    """``request.idempotency``: what a protected view knows about its key.

    Set on every request that reaches a protected view; ``key`` is ``None`` when
    the request carries none (a safe method, or an optional key left out).
    """

    key: str | None
    tenant: str
    replayed: bool = False
    _fingerprint: Keyed | None = field(default=None, repr=False)
    # Tasks this request has enqueued so far, by name: the outbox's n-th key.
    _enqueued: Counter[str] = field(default_factory=Counter, repr=False)
    # This execution's identity, drawn by the outbox at its first enqueue.
    _execution: str | None = field(default=None, repr=False)

    def derive(self, namespace: str) -> str:
        """A key for an outside service (e.g. a payment provider's Idempotency-Key)."""
        if self.key is None:
            raise ImproperlyConfigured(
                "request.idempotency.derive() needs an idempotency key, and this request "
                "carries none (a safe method, or IDEMPOTENCY_REQUIRED = False and no key sent)."
            )
        return derive_key(self.tenant, self.key, namespace)


class IdempotentRequest(HttpRequest):
    """For annotations only: a request that reached a protected view.

    ``def charge(request: IdempotentRequest) -> HttpResponse:`` lets a type
    checker see ``request.idempotency`` (django-htmx's ``HtmxHttpRequest`` idea).
    """

    idempotency: IdempotencyContext


_current: ContextVar[IdempotencyContext | None] = ContextVar("idempotency_context", default=None)


def current_context() -> IdempotencyContext | None:
    """The context of the protected request being served here, if any (e.g. for the outbox)."""
    return _current.get()


def applies(request: HttpRequest, options: Options) -> bool:
    """Whether this request is protected at all: unsafe and one of the view's methods."""
    method = (request.method or "").upper()
    return method not in SAFE_METHODS and method in options.methods


def passing_through(request: HttpRequest, tenant_of: TenantOf) -> None:
    """``request.idempotency`` for a request the protection lets through untouched."""
    take_over_from_switch(request)
    if not hasattr(request, "idempotency"):
        try:
            tenant = str(tenant_of())
        except Exception:  # noqa: BLE001  (only informative here)
            tenant = ""
        request.idempotency = IdempotencyContext(None, tenant)  # type: ignore[attr-defined]


# Set on the request while IdempotencyMiddleware's claim runs its view: a protection of the
# same request below it (one the switch could not see from the URL's view) takes it over.
SWITCH_CLAIMED = "_idempotency_claimed_by_switch"


class SwitchDeferred(BaseException):
    """A protection of the request was reached under ``IdempotencyMiddleware``'s claim.

    The switch withdraws: its claim's transaction rolls back (nothing the view did so far
    is kept, nothing is stored) and Django runs the view, whose own protection decides
    with its own options (tenant, redaction, methods...). A ``BaseException``, as
    ``GeneratorExit``: a view's ``except Exception`` (a GraphQL executor's, around its
    resolvers) must not take it for the view's error.
    """


def claimed_by_switch(request: HttpRequest) -> bool:
    """Whether ``request`` (or the Django request under a DRF one) is claimed by
    ``IdempotencyMiddleware``, which is still running its view."""
    return getattr(_raw(request), SWITCH_CLAIMED, False) is True


def take_over_from_switch(request: HttpRequest) -> None:
    """Where a protection begins: under the switch's claim, raise :class:`SwitchDeferred`,
    so that this protection, not the switch, decides (one decision, the view's own)."""
    if claimed_by_switch(request):
        raise SwitchDeferred


def protect(
    request: HttpRequest,
    policy: Policy,
    tenant_of: TenantOf,
    call_view: ViewCall,
    *,
    form_field: str | None = None,
) -> HttpResponse:
    """Answer ``request`` idempotently; raises ``IdempotencyError`` for client errors.

    The steps, each a call down: the tenant, the key, the fingerprint; then a
    replay from the cache, or the claim (:func:`.execution.claimed`) and, under
    it, the view and the record of its answer. ``tenant_of()`` resolves the
    tenant; it is called once the adapter has authenticated, and again after the
    view, to catch a view that authenticates on its own (then the tenant the
    claim used was not the caller's). ``form_field`` names the form field a form POST
    may carry its key in when the header is absent (``@idempotent``'s, for HTML forms).
    Under ``IdempotencyMiddleware``'s claim, raises :class:`SwitchDeferred`: this
    protection decides, not the switch.
    """
    take_over_from_switch(request)
    seen = signals.Observation("http", request.method, _route(request))
    token = None
    try:
        try:  # a resolver may load the session's user from the database
            tenant = check_tenant(tenant_of())
        except (OperationalError, InterfaceError) as exc:  # as store_errors(), inline
            raise translate(exc) from exc
        context = IdempotencyContext(None, tenant)
        request.idempotency = context  # type: ignore[attr-defined]
        token = _current.set(context)
        context.key = extract_key(request, policy, form_field)
        if context.key is None:
            seen.skip = True
            response = _call(call_view)
        else:
            context._fingerprint = keyed(policy.fingerprint(request))
            seen.key = (tenant, context.key)
            view = _View(request, call_view, tenant_of, tenant)
            response = _answer(context, policy, view, seen)
        seen.answered(response.status_code)
        return response
    except IdempotencyError as error:
        seen.refused(error)
        seen.answered(error.status)
        raise
    except SwitchDeferred:
        seen.skip = True  # the switch withdrew: the view's own protection reports the request
        raise
    except BaseException:
        seen.raised()
        raise
    finally:
        if token is not None:
            _current.reset(token)
        seen.send()


def _route(request: HttpRequest) -> str | None:
    match = getattr(request, "resolver_match", None)
    return match.view_name if match is not None else None


def extract_key(request: HttpRequest, policy: Policy, form_field: str | None = None) -> str | None:
    """The parsed key; ``None`` if absent and optional; raises when absent and required."""
    if policy.key:
        raw = extracted(policy.key, request)
    elif policy.meta_header:
        raw = request.META.get(policy.meta_header)  # request.headers builds a dict of all
    else:
        raw = request.headers.get(policy.header)
    if raw is None and form_field and not policy.key:
        raw = form_key(request, form_field)
    if raw is None:
        if policy.required:
            where = "an idempotency key" if policy.key else f"the {policy.header} header"
            if form_field and not policy.key:
                where += f" (or, in a form, its {form_field} field)"
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


def _answer(
    context: IdempotencyContext, policy: Policy, view: _View, seen: signals.Observation
) -> HttpResponse:
    """Replay a final answer, or claim the key and execute the view once."""
    assert context.key is not None
    assert context._fingerprint is not None
    fingerprint = context._fingerprint
    cached = _from_cache(context, policy, fingerprint)
    if cached is not None:
        seen.replayed("cache")
        return _replay(context, cached)
    target = Target(
        policy.database,
        context.tenant,
        context.key,
        fingerprint.current,
        policy.lease,
        policy.ttl,
        policy.idle,
    )
    seen.slot = Run(policy.protocol)
    if _marked_retry(view.request, policy) and settled(target, fingerprint.matches, seen.slot):
        assert seen.slot.replay is not None
        seen.replayed("database")
        _cache_on_commit(context, policy, fingerprint.current, seen.slot.replay, seen.slot)
        return _replay(context, seen.slot.replay)
    try:
        with claimed(target, policy.protocol, policy.wait, fingerprint.matches, seen.slot) as slot:
            if slot.replay is None:
                return _execute(policy, slot, view)
    except _Discard as discard:
        stored = discard.store and _store_alone(context, policy, target, discard.response)
        seen.executed(stored=stored)
        return discard.response
    assert slot.replay is not None
    seen.replayed("database")
    _cache_on_commit(context, policy, fingerprint.current, slot.replay, slot)
    return _replay(context, slot.replay)


# The client's mark on a retry (``idempotency_django.client`` sends it from the second
# attempt on): the answer is probably there, so it is looked up before any claim.
RETRY_META = "HTTP_IDEMPOTENCY_RETRY"


def _marked_retry(request: HttpRequest, policy: Policy) -> bool:
    """A marked retry whose lookup saves a round trip: under "lock", whose claim opens
    the view's transaction, and in autocommit (a caller's transaction is the claim's).
    A "lease" claim reads in autocommit itself: a lookup first would only add one."""
    return (
        RETRY_META in request.META
        and policy.protocol == "lock"
        and not connections[policy.database].in_atomic_block
    )


def _execute(policy: Policy, slot: Run, view: _View) -> HttpResponse:
    """Inside the claim's transaction: run the view, keep its answer if it is final."""
    with databases.watching(policy.database):
        response = require_plain(_call(view.run))
    if not _stored(response):
        raise _Discard(response)  # transient, or a refusal
    if transaction.get_rollback(using=policy.database):
        # The view marked its transaction for rollback: transient, unless it says otherwise.
        raise _Discard(response, store=getattr(response, STORE_AFTER_ROLLBACK, False))
    stored = stored_answer(response, policy.redact)
    slot.record(status_of(stored), stored, last=True)  # nothing runs after it: carries COMMIT
    # Not cached now: most keys are never retried, and a SET per first execution
    # would cost every request. The first replay from the database fills the cache.
    return response


def _call(call_view: ViewCall) -> HttpResponse:
    """Run the view; its own ``IdempotencyError`` (an inner ``idempotent_call``'s, about
    its key, not the client's) fails the view instead of answering the client."""
    try:
        return call_view()
    except IdempotencyError as exc:
        raise NestedRefusal(exc) from exc


@dataclass
class _View:
    """The view of a keyed request, run under its claim by :meth:`run`."""

    request: HttpRequest
    call_view: ViewCall
    tenant_of: TenantOf
    tenant: str  # what the claim used

    def run(self) -> HttpResponse:
        """The view's answer; fails loudly when the view authenticated the caller late.

        A view that changes who the caller is on purpose (a sign-up calling
        ``login()``, a delete-my-account calling ``logout()``) is fine: its key
        was claimed, and its answer is recorded, in the key space of the caller
        who sent the request (the tenant resolved before the view), where that
        caller's retry finds it. Any other change means the tenant was resolved
        before authentication, in the wrong key space.
        """
        raw = _raw(self.request)
        setattr(raw, _SWITCHED, False)
        try:
            response = self.call_view()
        except RuntimeError as exc:
            if "durable" not in str(exc):
                raise
            raise ImproperlyConfigured(_DURABLE) from exc
        if not getattr(raw, _SWITCHED) and check_tenant(self.tenant_of()) != self.tenant:
            raise ImproperlyConfigured(_TENANT_CHANGED)
        return response


# Set on the request by login() and logout() (their signals) while a protected view runs.
_SWITCHED = "_idempotency_principal_switched"


def _principal_switched(
    sender: object, request: HttpRequest | None = None, **kwargs: object
) -> None:
    raw = _raw(request)
    if raw is not None and hasattr(raw, _SWITCHED):
        setattr(raw, _SWITCHED, True)


def _raw(request: Any) -> Any:
    """Django's own request under a DRF ``Request`` (login() may be handed either)."""
    return getattr(request, "_request", request)


user_logged_in.connect(_principal_switched, dispatch_uid="idempotency_django.core.logged_in")
user_logged_out.connect(_principal_switched, dispatch_uid="idempotency_django.core.logged_out")


_DURABLE = (
    "A protected view runs inside the transaction that holds its idempotency claim, so "
    "transaction.atomic(durable=True) can't be used in it: use a plain atomic() block."
)
_TENANT_CHANGED = (
    "The idempotency tenant changed while the view ran, and not through login() or "
    "logout(): the view authenticates the caller itself, after @idempotent resolved the "
    "tenant, so the key was claimed in the wrong caller's key space. Nothing was stored. "
    "Put @idempotent below (after) the authentication decorators, or, for Django REST "
    "framework views, use idempotency_django.rest_framework.IdempotentMixin (or "
    "@api_view above @idempotent). A view that signs a user in or out on purpose must do "
    "it with django.contrib.auth's login()/logout() (or alogin()/alogout())."
)


def bound_request_transaction(alias: str) -> None:
    """Under ``ATOMIC_REQUESTS``, when the request's transaction is Django's (a wrapper above
    ``@idempotent`` hid its ``_non_atomic_requests``, as DRF's ``@api_view`` does; a Ninja
    operation, which Django wraps whole), bound that transaction ourselves.

    The claim then runs inside Django's request-wide ``atomic()``, which the store
    leaves unbounded (a caller's transaction is not ours to cut short); but this one
    is the request's, the one ``IDEMPOTENCY_IDLE_TIMEOUT`` is for: without the bound a
    holder lost behind a partition keeps its key for as long as TCP takes to notice.
    """
    # Where Django's handler reads it (make_view_atomic): no connection looked up per request.
    if not connections.settings[alias]["ATOMIC_REQUESTS"]:
        return  # checked first: the common case reads no setting
    conn = connections[alias]
    if conn.vendor != "postgresql":
        return
    idle = conf.IDLE_TIMEOUT
    if idle is None:
        return
    if len(conn.atomic_blocks) != 1:  # not inside exactly Django's request block
        return
    with store_errors(), conn.cursor() as cursor:
        milliseconds = str(max(1, int(idle.total_seconds() * 1000)))
        cursor.execute(f"SELECT {IDLE_BOUND}", [milliseconds])


def _stored(response: HttpResponse) -> bool:
    """Whether this answer is stored and replayed: final, not an auth refusal, and not a
    form shown again with its errors."""
    return (
        is_final(response.status_code)
        and not is_refusal(response)
        and not shows_form_errors(response)
    )


def is_refusal(response: HttpResponse) -> bool:
    """401, 403, or a redirect to ``LOGIN_URL``: never stored (the caller may log in)."""
    if response.status_code in (401, 403):
        return True
    if not 300 <= response.status_code < 400 or "Location" not in response:
        return False
    login = urlsplit(resolve_url(settings.LOGIN_URL)).path
    return urlsplit(response["Location"]).path == login


def _from_cache(
    context: IdempotencyContext, policy: Policy, fingerprint: Keyed
) -> StoredResponse | None:
    if policy.cache is None:
        return None
    assert context.key is not None
    return cache.replay(
        policy.cache, policy.database, context.tenant, context.key, fingerprint.matches
    )


def _cache_on_commit(
    context: IdempotencyContext, policy: Policy, fingerprint: str, answer: StoredResponse, slot: Run
) -> None:
    """Cache ``answer`` once the transaction commits, never past the entry's own expiry.

    The lifetime is the database's (the entry's time left), less what this
    process's monotonic clock says has passed since: no wall clock involved.
    """
    if policy.cache is None:
        return
    assert context.key is not None
    cache.fill_on_commit(
        policy.cache,
        policy.database,
        context.tenant,
        context.key,
        fingerprint,
        answer,
        slot.remaining,  # the replayed entry's seconds to live: never past it
    )


def _replay(context: IdempotencyContext, stored: StoredResponse) -> HttpResponse:
    context.replayed = True
    return stored.to_response()


def _store_alone(
    context: IdempotencyContext, policy: Policy, target: Target, response: HttpResponse
) -> bool:
    """Claim the key again and store ``response`` alone; whether it was stored.

    Its view's writes have rolled back (and the claim with them): if another
    request has taken the key meanwhile, this answer is given unstored.
    """
    assert context._fingerprint is not None
    stored = stored_answer(response, policy.redact)
    try:
        with claimed(target, policy.protocol, 0, context._fingerprint.matches) as slot:
            if slot.replay is None:
                slot.record(status_of(stored), stored)
                return True
    except IdempotencyError:
        pass
    return False


class _Discard(Exception):
    """Leaves the atomic block so the view's writes roll back, keeping its response."""

    def __init__(self, response: HttpResponse, store: bool = False) -> None:
        super().__init__(response.status_code)
        self.response, self.store = response, store


@contextmanager
def store_errors() -> Iterator[None]:
    """Database errors while protecting a request become a 503 (or a 409): nothing ran."""
    try:
        yield
    except (OperationalError, InterfaceError) as exc:
        raise translate(exc) from exc


__all__ = [
    "IdempotencyContext",
    "IdempotencyError",
    "IdempotentRequest",
    "applies",
    "bound_request_transaction",
    "claimed_by_switch",
    "current_context",
    "passing_through",
    "protect",
    "store_errors",
    "take_over_from_switch",
]
