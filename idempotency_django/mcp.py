"""Idempotent MCP tools (django-mcp-server): a thin adapter to :mod:`.calls`.

An agent framework retries a tool call on a timeout, and an agent that re-plans
may call "create order" again: ``@idempotent`` runs the tool once per (caller,
key) and answers every duplicate with the first call's result::

    class OrderTools(MCPToolset):
        @idempotent
        def create_order(self, item: str, quantity: int, idempotency_key: str) -> dict:
            "Order ``quantity`` of ``item``."

The key is the tool's ``idempotency_key`` argument (the tool's description tells the
agent how to choose it), or ``key=`` a callable of the other arguments
(``key=from_arguments``: identical arguments are one call). The caller (tenant) is
the MCP session's Django user, as ``IDEMPOTENCY_TENANT_RESOLVER`` finds it on the
request (``tenant=`` overrides it). Keys live in their own namespace per tool.

Importing this module imports django-mcp-server; importing ``idempotency_django`` does not.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar, Unpack, overload

from idempotency_django._adapters.extras import raise_missing_extra

try:
    import mcp_server  # noqa: F401
except ModuleNotFoundError as error:  # pragma: no cover  (tested in a subprocess)
    raise_missing_extra(error, __name__, "mcp")
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest
from mcp_server.djangomcp import django_request_ctx

from idempotency_django._protocol.fingerprint import arguments_digest
from idempotency_django._protocol.options import TOOL_OPTIONS, Options, ToolOptions, build_for
from idempotency_django.calls import idempotent_call
from idempotency_django.exceptions import IdempotencyError, KeyMissing

Tool = TypeVar("Tool", bound=Callable[..., Any])
KEY_ARGUMENT = "idempotency_key"
HELP = (
    "\n\nIdempotent: pass `idempotency_key`, a new unique string (e.g. a UUID) for each "
    "distinct action you intend. If this call times out or fails with a connection error, "
    "call again with the SAME key and the same arguments: the action is done at most once "
    "and you get its result. Use a NEW key only for a new action. A key reused with other "
    "arguments is refused (key-reused); a call whose key is still running is refused "
    "(in-progress): wait and retry with the same key."
)
HELP_DERIVED = (
    "\n\nIdempotent: calling it again with the same arguments does not repeat the action; "
    "it returns the first call's result."
)


class ToolRefused(Exception):
    """A refused call (its key reused, or still running), as the agent reads it."""

    def __init__(self, error: IdempotencyError) -> None:
        retry = error.headers().get("Retry-After")
        after = f" Retry with the same key in {retry} s." if retry else ""
        super().__init__(f"{error.code}: {error.detail}{after}")
        self.error = error


@overload
def idempotent(tool: Tool, /) -> Tool: ...


@overload
def idempotent(
    *, key: Callable[..., str] | None = None, **options: Unpack[ToolOptions]
) -> Callable[[Tool], Tool]: ...


def idempotent(
    tool: Any = None, /, *, key: Callable[..., str] | None = None, **options: Unpack[ToolOptions]
) -> Any:
    """Run an MCP tool at most once per (caller, key): ``@idempotent`` or ``@idempotent(...)``."""
    if key is not None and not callable(key):
        raise TypeError("@idempotent(key=...) takes a callable of the tool's arguments.")
    built = build_for("idempotent", options, TOOL_OPTIONS)
    if tool is None:
        return functools.partial(_decorate, key=key, options=built)
    return _decorate(tool, key=key, options=built)


def from_arguments(**arguments: Any) -> str:
    """A key that is the arguments themselves (a digest): identical calls are one call."""
    return arguments_digest(arguments)


def _decorate(tool: Tool, *, key: Callable[..., str] | None, options: Options) -> Tool:
    if inspect.iscoroutinefunction(tool):
        raise TypeError(
            "@idempotent (idempotency_django.mcp) protects sync tools (django-mcp-server runs them in a thread)."
        )
    shape = inspect.signature(tool)
    if key is None and KEY_ARGUMENT not in shape.parameters:
        raise TypeError(
            f"@idempotent tool {tool.__qualname__} needs an {KEY_ARGUMENT!r} argument "
            "(the agent's key), or @idempotent(key=...) deriving it from the arguments."
        )
    scope = f"mcp:{tool.__qualname__}"

    @functools.wraps(tool)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        request = _request(args[0] if args else None)
        arguments = _named(shape, args, kwargs)
        chosen = key(**arguments) if key is not None else arguments.pop(KEY_ARGUMENT, None)
        if not isinstance(chosen, str) or not chosen:
            raise ToolRefused(_missing())
        policy = options.resolve(request)
        try:
            with idempotent_call(
                chosen,
                scope=scope,
                tenant=policy.tenant(request),
                arguments=arguments,
                ttl=options.ttl,
                database=policy.database,
                protocol=options.protocol,
                wait=policy.wait,
                origin="mcp",
            ) as call:
                if not call.replayed:
                    call.result = tool(*args, **kwargs)
        except IdempotencyError as error:
            raise ToolRefused(error) from error
        return call.result

    wrapper.__doc__ = (tool.__doc__ or "").rstrip() + (HELP if key is None else HELP_DERIVED)
    return wrapper  # type: ignore[return-value]


def _named(
    shape: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, Any]:
    """The call's arguments by name, defaults filled in, without ``self``."""
    bound = shape.bind(*args, **kwargs)  # a wrong call is the tool's own TypeError
    bound.apply_defaults()
    named = dict(bound.arguments)
    named.pop("self", None)
    return named


def _missing() -> IdempotencyError:
    return KeyMissing(f"This tool requires an idempotency key: its {KEY_ARGUMENT} argument.")


def _request(owner: object) -> HttpRequest:
    """The MCP call's Django request: the toolset's ``self.request``, else django-mcp-server's."""
    for candidate in (getattr(owner, "request", None), django_request_ctx.get(None)):
        request = _django_request(candidate)
        if request is not None:
            return request
    raise ImproperlyConfigured(
        "An idempotent MCP tool needs the MCP call's Django request (to know its user): "
        "call it through django-mcp-server, as an MCPToolset method or a server tool."
    )


def _django_request(candidate: object) -> HttpRequest | None:
    """``candidate`` itself, or the HttpRequest a DRF ``Request`` wraps.

    django-mcp-server's endpoint is a DRF view: a served call's request is DRF's, whose
    authentication also set the user on the HttpRequest it wraps (its ``user`` setter).
    """
    if isinstance(candidate, HttpRequest):
        return candidate
    wrapped = getattr(candidate, "_request", None)
    return wrapped if isinstance(wrapped, HttpRequest) else None


__all__ = ["ToolRefused", "from_arguments", "idempotent"]
