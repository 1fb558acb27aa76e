"""``IdempotentMixin``: a thin adapter from Django REST framework views to :mod:`.core`.

The claim happens after DRF's authentication and permission checks, so the tenant
is the DRF-authenticated user and their 401/403 are never stored; throttles run
once the claim is won (:mod:`.throttling`), so replays spend no budget.
Importing this module imports DRF; importing ``idempotency_django`` does not.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import timedelta
from inspect import iscoroutinefunction
from typing import TYPE_CHECKING, Any, ClassVar, Final

from asgiref.sync import async_to_sync, sync_to_async
from django.core.exceptions import ImproperlyConfigured
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.db import connections, transaction
from django.http import HttpResponse
from django.http.response import HttpResponseBase

from idempotency_django._adapters.extras import raise_missing_extra

try:
    from rest_framework import exceptions
except ModuleNotFoundError as error:  # pragma: no cover  (tested in a subprocess)
    raise_missing_extra(error, __name__, "drf")
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from idempotency_django._adapters import throttling
from idempotency_django._adapters.decorators import EntriesDatabase
from idempotency_django._conf import MAX_TTL, bounded, conf
from idempotency_django._protocol import core
from idempotency_django._protocol.fingerprint import digest, snapshot
from idempotency_django._protocol.options import VIEW_OPTIONS, Options, Policy
from idempotency_django._protocol.redact import Redactor
from idempotency_django._protocol.responses import problem_response, require_plain
from idempotency_django.exceptions import (
    IdempotencyError,
    KeyMalformed,
    KeyMissing,
    KeyReused,
    RequestInProgress,
    StoreUnavailable,
)

if TYPE_CHECKING:
    _Base = APIView
else:
    _Base = object

Handler = Callable[..., HttpResponseBase]

# Raised by a handler (e.g. object permissions in ``get_object()``), these are the
# same refusals DRF's checks answer before the claim: never stored, key freed.
_NEVER_STORED = (
    exceptions.NotAuthenticated,
    exceptions.AuthenticationFailed,
    exceptions.PermissionDenied,
    exceptions.Throttled,
    DjangoPermissionDenied,
)


class IdempotentMixin(_Base):
    """Make a DRF view's unsafe methods safe to retry with an ``Idempotency-Key``.

    Put it before the view class: ``class ChargeViewSet(IdempotentMixin, ModelViewSet)``.
    Each ``idempotency_*`` attribute left at ``None`` falls back to its setting.
    """

    #: Request header carrying the key (``IDEMPOTENCY_HEADER``).
    idempotency_header: ClassVar[str | None] = None
    #: Answer 400 when the key is missing (``IDEMPOTENCY_REQUIRED``).
    idempotency_required: ClassVar[bool | None] = None
    #: How long a final answer is kept and replayed, seconds or ``timedelta`` (``IDEMPOTENCY_TTL``).
    idempotency_ttl: ClassVar[float | timedelta | None] = None
    #: How long an in-progress claim is trusted (``IDEMPOTENCY_LEASE``).
    idempotency_lease: ClassVar[float | timedelta | None] = None
    #: The unsafe methods protected; ``None`` means POST, PUT, PATCH and DELETE.
    idempotency_methods: ClassVar[Iterable[str] | None] = None
    #: Database alias holding the entries, or a callable (request → alias) or its dotted
    #: path (``IDEMPOTENCY_DATABASE``).
    idempotency_database: ClassVar[str | Callable[..., str] | None] = None
    #: Cache alias of the replay cache (``IDEMPOTENCY_CACHE``).
    idempotency_cache: ClassVar[str | None] = None
    #: ``"lock"`` or ``"lease"`` (``IDEMPOTENCY_PROTOCOL``).
    idempotency_protocol: ClassVar[str | None] = None
    #: Seconds a duplicate waits for the in-flight original's answer (``IDEMPOTENCY_WAIT``).
    idempotency_wait: ClassVar[float | timedelta | None] = None
    #: What of the answer is stored for replays (``IDEMPOTENCY_REDACT``): a callable
    #: (response → response to store) or JSON field paths such as ``["token"]``.
    idempotency_redact: ClassVar[Redactor | Sequence[str] | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        mro = cls.__mro__
        if APIView in mro and mro.index(APIView) < mro.index(IdempotentMixin):
            # APIView.initial() would shadow the mixin's: nothing would be protected.
            raise ImproperlyConfigured(
                f"{cls.__qualname__}: put IdempotentMixin before the DRF view class, "
                f"e.g. class {cls.__name__}(IdempotentMixin, ModelViewSet)."
            )

    @classmethod
    def as_view(cls, *args: Any, **initkwargs: Any) -> Any:
        options = cls.get_idempotency_options()
        view = super().as_view(*args, **initkwargs)
        # Merged, not replaced: as_view() copied dispatch()'s own marker (from
        # @method_decorator(transaction.non_atomic_requests(...), name="dispatch")).
        marker = EntriesDatabase(options)
        marker.others.update(getattr(view, "_non_atomic_requests", ()))
        view._non_atomic_requests = marker  # type: ignore[attr-defined]
        return view

    @classmethod
    def get_idempotency_options(cls) -> Options:
        """The view's options from its ``idempotency_*`` attributes.

        Raises ``ImproperlyConfigured`` on a wrong value; ``as_view()`` calls it, so
        a mistake fails when the URLconf loads, not at the first request.
        """
        try:
            return Options.build(
                **{name: getattr(cls, attribute) for name, attribute in _ATTRIBUTES}
            )
        except TypeError as exc:
            # Options speaks the decorator's language; name the attribute instead.
            message = str(exc).replace("@idempotent(", "idempotency_").replace("=...)", "")
            raise ImproperlyConfigured(f"{cls.__qualname__}.{message}") from exc

    def get_idempotency_key(self, request: Request) -> str | None:
        """The raw key this request carries, or ``None`` if it carries none.

        Called after authentication. The value is then parsed and checked (a
        quoted string is unquoted; empty, too long or non-ASCII is a 400).
        Default: the ``idempotency_header`` (``IDEMPOTENCY_HEADER``) header.
        """
        return request.headers.get(self.idempotency_header or conf.HEADER)

    def get_idempotency_tenant(self, request: Request) -> str:
        """Whose key space this request's key lives in; called after authentication.

        Default: ``IDEMPOTENCY_TENANT_RESOLVER`` called with the DRF request, so
        ``request.user`` is the user DRF authenticated (token, session, ...).
        """
        # Resolvers read ``request.user``; DRF's request provides it.
        return conf.TENANT_RESOLVER(request)

    def get_idempotency_fingerprint(self, request: Request) -> str:
        """A digest of what makes this request "the same request" as an earlier one.

        Called after authentication, so an unauthenticated caller costs no
        parsing; the body's bytes were kept before authentication (DRF's CSRF
        check may consume the stream). Default: method, path, query, content
        type and body of the Django request, JSON compared canonically; the
        whole body is read, so ``DATA_UPLOAD_MAX_MEMORY_SIZE`` applies.
        """
        return digest(self._idempotency_snapshot)

    def get_idempotency_ttl(self) -> float | timedelta:
        """How long this view's final answers are kept and replayed: seconds or ``timedelta``.

        Default: ``idempotency_ttl``, else ``IDEMPOTENCY_TTL``.
        """
        return conf.TTL if self.idempotency_ttl is None else self.idempotency_ttl

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        options = self.get_idempotency_options()
        if not core.applies(request._request, options):
            self._authenticate(request, *args, **kwargs)
            core.passing_through(request._request, lambda: self.get_idempotency_tenant(request))
            return
        # Before authentication: SessionAuthentication's CSRF check reads request.POST,
        # so DRF streams a multipart body (any body before DRF 3.16), after which
        # Django can no longer hand the fingerprint its bytes. Only the bytes are
        # kept now; they are parsed once the caller is authenticated.
        self._idempotency_snapshot = snapshot(request._request)
        throttling.defer(self)  # a replay or a 409 must spend no throttle budget
        self._authenticate(request, *args, **kwargs)
        # dispatch() looks the handler up after initial() returns: wrap it now.
        name = (request.method or "").lower()
        handler = getattr(self, name, None) if name in self.http_method_names else None
        if handler is not None:
            setattr(self, name, self._protected(throttling.throttled_first(self, handler), options))

    def check_throttles(self, request: Request) -> None:
        """DRF's, deferred on a protected request until its claim is won (:mod:`.throttling`)."""
        if not throttling.deferred(self):
            super().check_throttles(request)

    def _authenticate(self, request: Request, *args: Any, **kwargs: Any) -> None:
        """DRF's ``initial()``; a database outage there is the 503, not a debug page."""
        with core.store_errors():
            super().initial(request, *args, **kwargs)

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, IdempotencyError):
            return self._idempotency_error(exc)  # type: ignore[return-value]
        return super().handle_exception(exc)

    def _protected(self, handler: Handler, options: Options) -> Handler:
        if iscoroutinefunction(handler):
            return _awaitable(self._protected(async_to_sync(handler), options))

        @functools.wraps(handler)
        def protected(request: Request, *args: Any, **kwargs: Any) -> HttpResponseBase:
            try:
                policy = self._idempotency_policy(request, options)
                return core.protect(
                    request._request,
                    policy,
                    lambda: self.get_idempotency_tenant(request),
                    lambda: self._respond(handler, policy.database, request, args, kwargs),
                )
            except IdempotencyError as error:
                return self._idempotency_error(error)

        return protected

    def _idempotency_policy(self, request: Request, options: Options) -> Policy:
        try:
            ttl = bounded(self.get_idempotency_ttl(), MAX_TTL)
        except ValueError:
            name = f"{type(self).__qualname__}.get_idempotency_ttl()"
            raise ValueError(f"{name} must be positive and at most 100 years.") from None
        return replace(
            options.resolve(request._request),
            ttl=ttl,
            key=self._key_extractor(request),
            fingerprint=lambda _request: self.get_idempotency_fingerprint(request),
        )

    def _key_extractor(self, request: Request) -> Callable[[Any], str | None] | None:
        # Not overridden: the core reads the header itself (and names it in a 400).
        if type(self).get_idempotency_key is IdempotentMixin.get_idempotency_key:
            return None
        return lambda _request: self.get_idempotency_key(request)

    def _respond(
        self,
        handler: Handler,
        database: str,
        request: Request,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> HttpResponse:
        """Run the handler as dispatch() would, into a rendered, storable response."""
        # No savepoint (two round trips per request): a handler's IntegrityError,
        # or DRF's set_rollback() (under ATOMIC_REQUESTS), marks the claim's whole
        # transaction for rollback instead; the core then rolls the handler's
        # writes back and stores the project's exception-handler answer in a
        # transaction of its own (core.STORE_AFTER_ROLLBACK).
        try:
            response = handler(request, *args, **kwargs)
        except (*_NEVER_STORED, IdempotencyError):
            raise  # an IdempotencyError here is an inner call's: the core fails the view
        except Exception as exc:  # noqa: BLE001  (as dispatch() does)
            # A non-API exception re-raises here: the core rolls back, frees the key.
            response = self.handle_exception(exc)
        if connections[database].in_atomic_block and transaction.get_rollback(using=database):
            setattr(response, core.STORE_AFTER_ROLLBACK, True)
        return require_plain(self.finalize_response(request, response, *args, **kwargs))  # type: ignore[arg-type]

    def _idempotency_error(self, error: IdempotencyError) -> HttpResponseBase:
        if conf.ERROR_FORMAT != "drf":
            return problem_response(error)
        response = self.handle_exception(to_api_exception(error))
        # Projects' exception handlers may drop headers; Retry-After must survive.
        for name, value in error.headers().items():
            response.setdefault(name, value)
        return response


#: The options the mixin reads from its ``idempotency_<name>`` attributes: those it declares.
_ATTRIBUTES: Final = tuple(
    (name, f"idempotency_{name}")
    for name in VIEW_OPTIONS
    if f"idempotency_{name}" in vars(IdempotentMixin)
)


def _awaitable(protected: Handler) -> Handler:
    """An adrf ``async def`` handler's protection, awaited by adrf's ``async_dispatch()``.

    The protocol holds a transaction, so it runs in a worker thread; the handler
    runs back on the event loop (``async_to_sync``), and its ``sync_to_async``
    database calls on that worker's thread and connection, inside the claim.
    """

    @functools.wraps(protected)
    async def awaitable(request: Request, *args: Any, **kwargs: Any) -> HttpResponseBase:
        return await sync_to_async(protected)(request, *args, **kwargs)

    return awaitable  # type: ignore[return-value]


class IdempotencyAPIError(exceptions.APIException):
    """An idempotency client error, under ``IDEMPOTENCY_DRF_ERROR_FORMAT = "drf"``.

    Raised into the project's ``EXCEPTION_HANDLER``; ``wait`` (seconds) becomes
    ``Retry-After`` there, and is added if the handler drops it.
    """

    status_code = 400
    default_code = "idempotency_error"
    wait: int | None = None


class KeyMissingError(IdempotencyAPIError):
    status_code, default_code = 400, "idempotency_key_missing"
    default_detail = KeyMissing.default_detail


class KeyMalformedError(IdempotencyAPIError):
    status_code, default_code = 400, "idempotency_key_malformed"
    default_detail = "The idempotency key is malformed."


class KeyReusedError(IdempotencyAPIError):
    status_code, default_code = 422, "idempotency_key_reused"
    default_detail = KeyReused.default_detail


class RequestInProgressError(IdempotencyAPIError):
    status_code, default_code = 409, "idempotency_request_in_progress"
    default_detail = RequestInProgress.default_detail


class StoreUnavailableError(IdempotencyAPIError):
    status_code, default_code = 503, "idempotency_store_unavailable"
    default_detail = StoreUnavailable.default_detail


_API_ERRORS: dict[type[IdempotencyError], type[IdempotencyAPIError]] = {
    KeyMissing: KeyMissingError,
    KeyMalformed: KeyMalformedError,
    KeyReused: KeyReusedError,
    RequestInProgress: RequestInProgressError,
    StoreUnavailable: StoreUnavailableError,
}


def to_api_exception(error: IdempotencyError) -> IdempotencyAPIError:
    """The ``APIException`` a project's ``EXCEPTION_HANDLER`` formats for ``error``."""
    api_error = _API_ERRORS.get(type(error), IdempotencyAPIError)(error.detail)
    api_error.status_code = error.status
    retry_after = error.headers().get("Retry-After")
    if retry_after is not None:
        api_error.wait = int(retry_after)
    return api_error


__all__ = [
    "IdempotencyAPIError",
    "IdempotentMixin",
    "KeyMalformedError",
    "KeyMissingError",
    "KeyReusedError",
    "RequestInProgressError",
    "StoreUnavailableError",
    "to_api_exception",
]
