"""``IdempotencyMiddleware``: one switch that protects every unsafe request carrying a key.

A request is protected as ``@idempotent`` (with the settings' options) would protect
it when it is unsafe and carries a key, in the ``Idempotency-Key`` header or, for a
form post, in the ``idempotency_key`` field. It is let through untouched when:

- its view is marked ``@idempotency_exempt``;
- its view protects itself (``@idempotent``, ``IdempotentFormMixin``, DRF's
  ``IdempotentMixin``): after its own authentication, with its own options;
- its view is a Django REST framework view or a Django Ninja operation: they
  authenticate inside the view, after every middleware, and the key space must be
  the authenticated caller's (protect them with their own adapters);
- its view is ``async`` (``@idempotent`` protects those).

It protects in ``process_view``, so it must come after every middleware whose
``process_view`` must run first: put it last in ``MIDDLEWARE`` (after
``CsrfViewMiddleware``, ``AuthenticationMiddleware``, ``LoginRequiredMiddleware``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from inspect import iscoroutinefunction
from typing import Any, TypeVar

from django.http import HttpRequest, HttpResponse

from idempotency_django.decorators import EntriesDatabase, handle
from idempotency_django.forms import FIELD_NAME, is_form_post
from idempotency_django.keys import form_field
from idempotency_django.options import SAFE_METHODS, Options

ViewFunc = TypeVar("ViewFunc", bound=Callable[..., Any])
EXEMPT = "idempotency_exempt"
_OPTIONS = Options()  # the settings' own, as a bare @idempotent's


def idempotency_exempt(view: ViewFunc) -> ViewFunc:
    """Leave ``view`` out of ``IdempotencyMiddleware``'s protection (as ``csrf_exempt``)."""
    if iscoroutinefunction(view):

        async def async_exempt(*args: Any, **kwargs: Any) -> Any:
            return await view(*args, **kwargs)

        wrapper: Any = async_exempt
    else:

        def exempt(*args: Any, **kwargs: Any) -> Any:
            return view(*args, **kwargs)

        wrapper = exempt
    wrapper = functools.wraps(view)(wrapper)
    setattr(wrapper, EXEMPT, True)
    return wrapper  # type: ignore[no-any-return]


class IdempotencyMiddleware:
    """Protects every unsafe request that carries a key, as ``@idempotent`` would."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_view(
        self,
        request: HttpRequest,
        view: Callable[..., Any],
        view_args: tuple[Any, ...],
        view_kwargs: dict[str, Any],
    ) -> HttpResponse | None:
        if not protects(request, view):
            return None
        # The view is called here, so Django's ATOMIC_REQUESTS wrapper is not around it:
        # the claim's transaction holds the view, as under @idempotent.
        return handle(request, _OPTIONS, lambda: view(request, *view_args, **view_kwargs))


def protects(request: HttpRequest, view: Callable[..., Any]) -> bool:
    """Whether the middleware protects this request to this view (see the module's doc)."""
    if (request.method or "").upper() in SAFE_METHODS or (request.method or "") == "":
        return False
    if getattr(view, EXEMPT, False) or iscoroutinefunction(view) or _protects_itself(view):
        return False
    if _authenticates_inside(view):
        return False
    return carries_key(request)


def carries_key(request: HttpRequest) -> bool:
    """A key in the header (even an empty one: @idempotent answers it 400), or in a form
    post's ``idempotency_key`` field."""
    policy = _OPTIONS.resolve(request)
    if is_form_post(request, policy):
        return form_field(request, FIELD_NAME) is not None
    if policy.meta_header:
        return policy.meta_header in request.META
    return policy.header in request.headers


def _protects_itself(view: Callable[..., Any]) -> bool:
    # @idempotent and the mixins' as_view() mark their view with the entries' database.
    return isinstance(getattr(view, "_non_atomic_requests", None), EntriesDatabase)


def _authenticates_inside(view: Callable[..., Any]) -> bool:
    """A DRF view (``as_view()`` and ``@api_view`` set ``view.cls``) or a Ninja operation."""
    cls = getattr(view, "cls", None)
    if isinstance(cls, type) and any(
        base.__module__.startswith("rest_framework.") for base in cls.__mro__
    ):
        return True
    view = view.func if isinstance(view, functools.partial) else view  # Ninja's docs views
    return str(getattr(view, "__module__", "")).startswith("ninja.")
