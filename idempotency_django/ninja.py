"""``@idempotent`` for Django Ninja operations: a thin adapter to :mod:`.core`.

Ninja runs an operation as: authentication, parameter validation (its 422),
the function, then rendering of whatever the function returned. The key is
claimed inside the function's call, so Ninja's own 401/422 never claim a key,
and the answer stored is the one Ninja rendered (the function's result through
the operation's response schema and renderer), so a replay is byte-identical.

Importing this module imports Ninja; importing ``idempotency_django`` does not.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import hmac
import inspect
from collections.abc import Callable
from inspect import iscoroutinefunction
from typing import Any, TypeVar, Unpack, overload

from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db.models import Model
from django.http import HttpRequest, HttpResponse
from django.utils.encoding import force_bytes

from idempotency_django._adapters.extras import raise_missing_extra

try:
    import ninja  # noqa: F401
except ModuleNotFoundError as error:  # pragma: no cover  (tested in a subprocess)
    raise_missing_extra(error, __name__, "ninja")
from ninja.decorators import decorate_view
from ninja.operation import Operation

from idempotency_django._adapters import openapi
from idempotency_django._adapters.decorators import applied
from idempotency_django._conf import TenantResolver, conf
from idempotency_django._protocol import core
from idempotency_django._protocol.options import Options, ViewOptions
from idempotency_django._protocol.responses import PROBLEM_CONTENT_TYPE, problem_response
from idempotency_django._storage.secret import server_secret
from idempotency_django.exceptions import IdempotencyError

Func = TypeVar("Func", bound=Callable[..., Any])

_OPERATION = "_idempotency_ninja_operation"  # the running Operation, on the request
_PROTECTED = "_idempotency_ninja_options"  # on a protected function: its Options
_STREAMED = "{}: a streamed answer can't be stored, so a streaming operation can't be idempotent."
_HINT = (
    "put @idempotent directly under the Ninja operation decorator (@api.post(...) / "
    '@router.post(...)), or protect a whole router with router.add_decorator(idempotent(...), mode="view").'
)


@overload
def idempotent(view: Func, /) -> Func: ...


@overload
def idempotent(**options: Unpack[ViewOptions]) -> Callable[[Func], Func]: ...


def idempotent(view: Any = None, /, **kwargs: Any) -> Any:
    """Make a Ninja operation safe to retry: ``@idempotent`` or ``@idempotent(ttl=3600, ...)``.

    Directly under ``@api.post(...)``; or, for every operation of a router,
    ``router.add_decorator(idempotent(...), mode="view")``.
    """
    return applied(view, Options.build(**kwargs), _decorate)


def _decorate(view: Func, *, options: Options) -> Func:
    operation = _operation_of(view)
    if operation is not None:
        # router.add_decorator(idempotent(...), mode="view") hands us a bound operation's run.
        _protect_operation(operation, options)
        return _remembering(view, operation)  # type: ignore[return-value]
    if hasattr(view, "_ninja_operation"):
        raise TypeError(
            f"@idempotent is above the Ninja operation decorator, or in the wrong mode: {_HINT}"
        )
    protected = _protected(view, options)
    # First among the function's callbacks, so that our run wrapper sees the
    # operation's own bound run() (a @decorate_view below us wraps it after).
    theirs = list(getattr(view, "_ninja_contribute_to_operation", []))
    protected._ninja_contribute_to_operation = [  # type: ignore[attr-defined]
        functools.partial(_document, options=options),
        *theirs,
    ]
    decorate_view(_remember)(protected)
    callbacks = protected._ninja_contribute_to_operation  # type: ignore[attr-defined]
    callbacks.insert(0, callbacks.pop())
    return protected


def _protected(view: Func, options: Options) -> Func:
    wrapper = _async_view(view, options) if iscoroutinefunction(view) else _sync_view(view, options)
    protected = functools.wraps(view)(wrapper)
    setattr(protected, _PROTECTED, options)
    # Ninja resolves string annotations (``from __future__ import annotations``)
    # in the function's ``__globals__``: ours would be this module's, not the view's.
    with contextlib.suppress(NameError):
        protected.__signature__ = inspect.signature(view, eval_str=True)  # type: ignore[attr-defined]
    return protected  # type: ignore[return-value]


def _protect_operation(operation: Operation, options: Options) -> None:
    """The router-wide form: protect one (bound) operation, unless protected already."""
    if hasattr(operation.view_func, _PROTECTED):
        return  # its own @idempotent(...) is the more specific
    if operation.stream_format:
        raise ImproperlyConfigured(_STREAMED.format(operation.view_func.__qualname__))
    operation.view_func = _protected(operation.view_func, options)
    _document(operation, options=options)


def _operation_of(run: Callable[..., Any]) -> Operation | None:
    """The Operation whose ``run`` this is (through wrappers made with ``functools.wraps``)."""
    seen: Any = run
    while seen is not None:
        owner = getattr(seen, "__self__", None)
        if isinstance(owner, Operation):
            return owner
        seen = getattr(seen, "__wrapped__", None)
    return None


def _remember(run: Callable[..., Any]) -> Callable[..., Any]:
    operation = _operation_of(run)
    if operation is None:
        raise ImproperlyConfigured(f"@idempotent could not find the Ninja operation: {_HINT}")
    if operation.stream_format:
        raise ImproperlyConfigured(_STREAMED.format(operation.view_func.__qualname__))
    return _remembering(run, operation)


def _remembering(run: Callable[..., Any], operation: Operation) -> Callable[..., Any]:
    """``run`` that leaves the operation on the request: the function renders through it.

    Not a coroutine function even for an async operation: Ninja awaits what an
    async operation's ``run()`` returns, and that is ``run``'s coroutine.
    """

    @functools.wraps(run)
    def remembering(request: HttpRequest, **kwargs: Any) -> Any:
        setattr(request, _OPERATION, operation)
        return run(request, **kwargs)

    return remembering


def _sync_view(view: Callable[..., Any], options: Options) -> Callable[..., Any]:
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        render = _renderer(request, kwargs)
        return handle(request, options, lambda: render(view(request, *args, **kwargs)))

    return wrapper


def _async_view(view: Callable[..., Any], options: Options) -> Callable[..., Any]:
    # The protocol is synchronous (it holds a transaction) and runs in a worker
    # thread; the operation runs back on the event loop through async_to_sync,
    # its sync_to_async() database calls on that same thread and connection.
    async def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        render = _renderer(request, kwargs)
        call = async_to_sync(view)
        return await sync_to_async(handle)(
            request, options, lambda: render(call(request, *args, **kwargs))
        )

    return wrapper


def _renderer(request: HttpRequest, values: dict[str, Any]) -> Callable[[Any], HttpResponse]:
    """What Ninja does with the function's result after it returns, done before we store it."""
    operation: Operation | None = getattr(request, _OPERATION, None)
    if operation is None:
        raise ImproperlyConfigured(f"@idempotent ran outside a Ninja operation: {_HINT}")
    name = operation.signature.response_arg
    # The response the function may set headers and cookies on (``response: HttpResponse``).
    temporal = values[name] if name else operation.api.create_temporal_response(request)

    def render(result: Any) -> HttpResponse:
        return operation._result_to_response(request, result, temporal)  # type: ignore[return-value]

    return render


def handle(request: HttpRequest, options: Options, call_view: core.ViewCall) -> HttpResponse:
    """Protect one call of an operation, answering client errors as problem+json."""
    if not core.applies(request, options):
        core.passing_through(request, functools.partial(tenant, request, options.tenant))
        return call_view()
    try:
        policy = options.resolve(request)
        tenant_of = functools.partial(tenant, request, options.tenant, policy.database)
        core.bound_request_transaction(policy.database)  # Django wraps an operation whole
        return core.protect(request, policy, tenant_of, call_view)
    except IdempotencyError as error:
        return problem_response(error)


def tenant(
    request: HttpRequest, resolver: TenantResolver | None = None, using: str | None = None
) -> str:
    """Whose key space a Ninja request's key lives in.

    ``resolver(request)`` when given; else the principal Ninja authenticated
    (``request.auth``); else, with no authentication on the operation,
    ``IDEMPOTENCY_TENANT_RESOLVER`` (the anonymous scope, or the session's user).
    """
    if resolver is not None:
        return resolver(request)
    principal = getattr(request, "auth", None)
    if principal is None:
        return conf.TENANT_RESOLVER(request)
    return principal_tenant(principal, using)


def principal_tenant(principal: object, using: str | None = None) -> str:
    """The tenant of what a Ninja auth class returned.

    The principal's type is part of its tenant, so that two different principals never
    share a key space: an instance of ``AUTH_USER_MODEL`` is its primary key (the key
    space of ``IDEMPOTENCY_TENANT_RESOLVER``'s default, so a session caller and a
    ``django_auth`` caller are one tenant); any other model instance (a token row, a
    second user-like model) is its model's label and primary key; a string, bytes or
    number (an API key, a bearer token) is its type and a digest of it keyed by the
    server secret of the entries' database ``using`` (as derived keys are), never the
    credential itself (``7`` and ``"7"`` are two credentials).
    """
    if isinstance(principal, Model):
        label = principal._meta.label_lower
        if label == settings.AUTH_USER_MODEL.lower():
            return str(principal.pk)
        return f"{label}:{principal.pk}"
    kind = _CREDENTIAL_KINDS.get(type(principal)) or _credential_kind(principal)
    if kind is not None:
        return f"credential:{kind}:{_credential_digest(force_bytes(principal), using)}"
    raise ImproperlyConfigured(
        f"The Ninja auth returned {type(principal).__name__}, which does not say who the "
        "caller is: return a user, a model instance or the credential from the auth class, "
        "or pass @idempotent(tenant=...) a callable of the request."
    )


_CREDENTIAL_KINDS: dict[type, str] = {str: "str", bytes: "bytes", int: "int"}


def _credential_kind(principal: object) -> str | None:
    """A subclass's base kind (a ``str`` enum is a ``str``); ``None`` for a ``bool``."""
    if isinstance(principal, bool):
        return None
    return next(
        (kind for base, kind in _CREDENTIAL_KINDS.items() if isinstance(principal, base)), None
    )


def _credential_digest(credential: bytes, using: str | None) -> str:
    # Under the server secret, as derived keys are (secret.derive_key): a SECRET_KEY
    # rotation must not move a caller to a new key space mid-retry.
    secret = hashlib.sha256(b"idempotency_django.ninja.principal" + server_secret(using)).digest()
    return hmac.new(secret, credential, hashlib.sha256).hexdigest()


def _document(operation: Operation, *, options: Options) -> None:
    """Add the key header and the 400/409/422/503 answers to the operation's OpenAPI."""
    methods = {method.upper() for method in operation.methods}
    if not methods & options.methods or not operation.include_in_schema:
        return
    extra = dict(operation.openapi_extra or {})
    if options.key is None:
        # Read when the API module is imported (Ninja's schema is built from static data).
        header = options.header or conf.HEADER
        required = conf.REQUIRED if options.required is None else options.required
        parameters = [*extra.get("parameters", []), openapi.key_parameter(header, required)]
        extra["parameters"] = parameters
    extra["responses"] = {**copy.deepcopy(_ERRORS), **extra.get("responses", {})}
    operation.openapi_extra = extra


_PROBLEM = {PROBLEM_CONTENT_TYPE: {"schema": openapi.PROBLEM_SCHEMA}}
_ERRORS: dict[int, dict[str, Any]] = {
    code: {
        "description": description,
        "content": _PROBLEM,
        **(
            {"headers": {"Retry-After": openapi.RETRY_AFTER}}
            if code in openapi.RETRY_AFTER_CODES
            else {}
        ),
    }
    for code, description in openapi.ERRORS.items()
}

__all__ = ["idempotent", "principal_tenant", "tenant"]
