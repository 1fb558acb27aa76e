"""``@idempotent``: a thin adapter from a Django view to :mod:`idempotency_django._protocol.core`."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from inspect import iscoroutinefunction
from typing import Any, TypeVar, Unpack, overload

from asgiref.sync import async_to_sync, sync_to_async
from django.http import HttpRequest, HttpResponse

from idempotency_django._protocol import core
from idempotency_django._protocol.options import Options, ViewOptions
from idempotency_django._protocol.responses import problem_response
from idempotency_django.databases import entries_aliases
from idempotency_django.exceptions import IdempotencyError
from idempotency_django.forms import FIELD_NAME, form_policy

ViewFunc = TypeVar("ViewFunc", bound=Callable[..., Any])


class EntriesDatabase:
    """``view._non_atomic_requests``: the entries' alias, looked up at request time.

    Django wraps views in ``atomic()`` under ``ATOMIC_REQUESTS`` unless the alias
    is in this set; the protected view must manage that transaction itself so its
    claim commits before the view runs and duplicates get 409 rather than wait.
    """

    def __init__(self, options: Options) -> None:
        self.options = options
        self.others: set[str] = set()

    def _aliases(self) -> set[str]:
        return {*entries_aliases(self.options.database), *self.others}

    def __contains__(self, alias: object) -> bool:
        return alias in self._aliases()

    def __iter__(self) -> Iterator[str]:
        return iter(self._aliases())

    def add(self, alias: str) -> None:
        """What ``@transaction.non_atomic_requests`` stacked on top calls."""
        self.others.add(alias)


@overload
def idempotent(view: ViewFunc, /) -> ViewFunc: ...


@overload
def idempotent(**options: Unpack[ViewOptions]) -> Callable[[ViewFunc], ViewFunc]: ...


def idempotent(view: Any = None, /, **kwargs: Any) -> Any:
    """Make a view safe to retry: ``@idempotent`` or ``@idempotent(ttl=3600, ...)``."""
    return applied(view, Options.build(**kwargs), _decorate)


def applied(view: Any, options: Options, decorate: Callable[..., Any]) -> Any:
    """``@idempotent`` or ``@idempotent(...)`` (its options checked already): the view
    decorated, or the decorator that will."""
    if view is None:
        return functools.partial(decorate, options=options)
    if not callable(view):
        raise TypeError("@idempotent takes keyword arguments only, e.g. @idempotent(ttl=3600).")
    return decorate(view, options=options)


def _decorate(view: ViewFunc, *, options: Options) -> ViewFunc:
    if iscoroutinefunction(view):
        wrapper = _async_wrapper(view, options)
    else:
        wrapper = _sync_wrapper(view, options)
    protected = functools.wraps(view)(wrapper)
    # After wraps(), which copies the view's own marker (from a stacked
    # @transaction.non_atomic_requests) over ours: keep both.
    marker = EntriesDatabase(options)
    marker.others.update(getattr(view, "_non_atomic_requests", ()))
    protected._non_atomic_requests = marker  # type: ignore[attr-defined]
    return protected  # type: ignore[return-value]


def _sync_wrapper(view: Callable[..., HttpResponse], options: Options) -> Callable[..., Any]:
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        return handle(request, options, lambda: view(request, *args, **kwargs))

    return wrapper


def _async_wrapper(view: Callable[..., Any], options: Options) -> Callable[..., Any]:
    # The protocol is synchronous (it holds a transaction); the view runs inside it,
    # on the same thread, through async_to_sync.
    async def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        call = functools.partial(async_to_sync(view), request, *args, **kwargs)
        return await sync_to_async(handle)(request, options, call)

    return wrapper


def handle(request: HttpRequest, options: Options, call_view: core.ViewCall) -> HttpResponse:
    """Protect one call of a view, answering client errors as problem+json (a page, to a
    browser: ``refusal_pages``)."""
    core.take_over_from_switch(request)  # under IdempotencyMiddleware: these options decide
    if not core.applies(request, options):
        core.passing_through(request, lambda: options.resolve(request).tenant(request))
        return call_view()
    try:
        # A form post: its key may be its idempotency_key field, its duplicate waits.
        policy = form_policy(request, options.resolve(request), options)
        call = _rendered_for_drf(request, call_view)
        core.bound_request_transaction(policy.database)
        return core.protect(
            request, policy, lambda: policy.tenant(request), call, form_field=FIELD_NAME
        )
    except IdempotencyError as error:
        return problem_response(error, request)


def _rendered_for_drf(request: HttpRequest, call_view: core.ViewCall) -> core.ViewCall:
    """Under ``@api_view``, give the view's ``Response`` the renderer DRF negotiated.

    ``@api_view`` above ``@idempotent`` calls us with DRF's request, already
    authenticated; DRF would only pick the renderer after we return, but the
    answer must be rendered to be stored.
    """
    renderer = getattr(request, "accepted_renderer", None)
    if renderer is None:
        return call_view

    def call() -> HttpResponse:
        response = call_view()
        if callable(getattr(response, "render", None)) and not hasattr(
            response, "accepted_renderer"
        ):
            context = dict(getattr(request, "parser_context", None) or {})
            response.accepted_renderer = renderer  # type: ignore[attr-defined]
            response.accepted_media_type = request.accepted_media_type  # type: ignore[attr-defined]
            response.renderer_context = {**context, "request": request}  # type: ignore[attr-defined]
        return response

    return call
