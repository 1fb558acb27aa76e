"""``IdempotencyMiddleware``: one switch that protects every unsafe request carrying a key.

A request is protected when it is unsafe and carries a key, in the ``Idempotency-Key``
header or, for an urlencoded form post to a Django view, in the ``idempotency_key``
field (a multipart body is never read here: its view may set its upload handlers). How:

- a Django view (function or class, sync or ``async``): as a bare ``@idempotent``;
- a Django REST framework view (``APIView``, a viewset's action, ``@api_view``): as
  its class with ``IdempotentMixin`` in front would be, so DRF's authentication,
  permissions and throttles run first and the key space is DRF's ``request.user``;
- a Django Ninja operation: as Ninja's ``@idempotent`` would, inside the operation,
  after Ninja's authentication: the key space is the principal Ninja authenticated
  (``request.auth``). A streaming operation is not protected (its answer can't be stored).

DRF and Ninja read the key from the header only, as their adapters do. A request is
let through untouched when its view is marked ``@idempotency_exempt`` (a view
function, a view class, or a Ninja operation's function), or protects itself
(``@idempotent``, ``IdempotentFormMixin``, ``IdempotentMixin``, Ninja's ``@idempotent``,
a class view's decorated handler, an ``IdempotentAdminMixin`` admin's views, a GraphQL
view executing with an adapter's context): after its own authentication, with its own
options. A protection below the view it can't see takes the request over where it begins
(``SwitchDeferred``): the switch's claim rolls back and Django runs the view, whose own
protection decides. The view's exception goes to Django's ``process_exception`` chain,
as it would from the view.

It protects in ``process_view``, so it must come after every middleware whose
``process_view`` must run first: put it last in ``MIDDLEWARE`` (after
``CsrfViewMiddleware``, ``AuthenticationMiddleware``, ``LoginRequiredMiddleware``).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import weakref
from collections.abc import Awaitable, Callable
from inspect import isawaitable, iscoroutinefunction
from typing import TYPE_CHECKING, Any, TypeVar

from asgiref.sync import async_to_sync
from django.core.handlers.base import BaseHandler
from django.http import HttpRequest, HttpResponse

from idempotency_django._adapters.decorators import EntriesDatabase, handle
from idempotency_django._protocol.core import SWITCH_CLAIMED, SwitchDeferred
from idempotency_django._protocol.keys import form_field
from idempotency_django._protocol.options import SAFE_METHODS, Options
from idempotency_django.forms import FIELD_NAME, is_form_post

if TYPE_CHECKING:
    from ninja.operation import Operation

ViewFunc = TypeVar("ViewFunc", bound=Callable[..., Any])
Call = Callable[..., Any]  # the view call that replaces the view: (request, *args, **kwargs)
EXEMPT = "idempotency_exempt"
_OPTIONS = Options()  # the settings' own, as a bare @idempotent's
# Per DRF view function and per Ninja operation: what the middleware calls instead.
_DRF_VIEWS: weakref.WeakKeyDictionary[Callable[..., Any], Call] = weakref.WeakKeyDictionary()
_NINJA_RUNS: weakref.WeakKeyDictionary[Operation, Call] = weakref.WeakKeyDictionary()


def idempotency_exempt(view: ViewFunc) -> ViewFunc:
    """Leave ``view`` out of ``IdempotencyMiddleware``'s protection (as ``csrf_exempt``).

    A view function (a Ninja operation's function too) is wrapped; a view class (a
    DRF viewset a router serves) is marked, its subclasses with it.
    """
    if isinstance(view, type):
        setattr(view, EXEMPT, True)
        return view
    if iscoroutinefunction(view):

        async def async_exempt(*args: Any, **kwargs: Any) -> Any:
            return await view(*args, **kwargs)

        wrapper: Any = async_exempt
    else:

        def exempt(*args: Any, **kwargs: Any) -> Any:
            return view(*args, **kwargs)

        wrapper = exempt
    wrapper = functools.wraps(view)(wrapper)
    # Ninja resolves string annotations (``from __future__ import annotations``) in the
    # function's ``__globals__``: this module's, not the view's.
    with contextlib.suppress(NameError, SyntaxError, TypeError, ValueError):
        wrapper.__signature__ = inspect.signature(view, eval_str=True)
    setattr(wrapper, EXEMPT, True)
    return wrapper  # type: ignore[no-any-return]


class IdempotencyMiddleware:
    """Protects every unsafe request that carries a key, as ``@idempotent`` would."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.csrf = _csrf_middleware(get_response)
        self.handler = _loading_handler()

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_view(
        self,
        request: HttpRequest,
        view: Callable[..., Any],
        view_args: tuple[Any, ...],
        view_kwargs: dict[str, Any],
    ) -> HttpResponse | None:
        call = protection(request, view)
        if call is None:
            return None
        if self.csrf is not None:
            # Defensive (E091 reports the order): when CsrfViewMiddleware comes after the
            # switch, its process_view would never run; a request it already passed is
            # marked done, and a csrf_exempt view is let through by it as always.
            refused: HttpResponse | None = self.csrf.process_view(
                request, view, view_args, view_kwargs
            )
            if refused is not None:
                return refused
        # The view is called here, so Django's ATOMIC_REQUESTS wrapper is not around it:
        # the claim's transaction holds the view, as under @idempotent.
        try:
            return _answer(call(request, *view_args, **view_kwargs))
        except SwitchDeferred:
            # The view protects itself where the switch could not see it (below a decorator
            # without functools.wraps, or inside the view): the switch's claim is rolled
            # back, and Django runs the view, whose own protection decides.
            with contextlib.suppress(AttributeError):
                del request.idempotency  # type: ignore[attr-defined]
            return None
        except Exception as exc:
            answer = self._handled(request, exc)
            if answer is None:
                raise
            return answer

    def _handled(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        """Django's answer to the view's exception, as if the view had raised it to Django's
        handler: the project's ``process_exception`` middleware, in Django's order."""
        handler = self.handler() if self.handler is not None else None
        if handler is None:
            return None
        answer: HttpResponse | None = handler.process_exception_by_middleware(exc, request)
        return answer


def _loading_handler() -> weakref.ReferenceType[BaseHandler] | None:
    """The Django handler whose ``load_middleware()`` is creating the switch (its caller):
    the one that holds the ``process_exception`` chain. ``None`` when made otherwise."""
    frame = inspect.currentframe()
    try:
        while frame is not None and frame.f_code is not BaseHandler.load_middleware.__code__:
            frame = frame.f_back
        handler = frame.f_locals.get("self") if frame is not None else None
    finally:
        del frame
    return weakref.ref(handler) if isinstance(handler, BaseHandler) else None


def _csrf_middleware(get_response: Callable[[HttpRequest], HttpResponse]) -> Any:
    """An instance of the project's CsrfViewMiddleware (or its subclass), if installed."""
    from django.conf import settings
    from django.middleware.csrf import CsrfViewMiddleware
    from django.utils.module_loading import import_string

    for path in getattr(settings, "MIDDLEWARE", None) or ():
        with contextlib.suppress(ImportError):
            cls = import_string(path)
            if isinstance(cls, type) and issubclass(cls, CsrfViewMiddleware):
                return cls(get_response)
    return None


def protects(request: HttpRequest, view: Callable[..., Any]) -> bool:
    """Whether the middleware protects this request to this view (see the module's doc)."""
    return protection(request, view) is not None


def protection(request: HttpRequest, view: Callable[..., Any]) -> Call | None:
    """What the middleware calls instead of ``view``, or ``None`` to leave it alone."""
    if (request.method or "").upper() in SAFE_METHODS or not request.method:
        return None
    if _exempt(view) or _protects_itself(view) or _protected_below(request, view):
        return None
    drf_class = _drf_class(view)
    if drf_class is not None:
        return _drf_protection(request, view, drf_class)
    operation = _ninja_operation(request, view)
    if operation is not None:
        return _ninja_protection(request, operation)
    if _is_ninja(view) or not carries_key(request):
        return None  # a Ninja view whose operation this Ninja hides: never before its auth
    if iscoroutinefunction(view):
        return functools.partial(_protected_async, view)
    return functools.partial(_protected, view)


# The only body the switch reads a key from. A multipart body is left unread: its view may
# set request.upload_handlers first (Django refuses them once the body is parsed), so a
# multipart form behind the switch sends the header, or its view uses @idempotent.
URLENCODED = "application/x-www-form-urlencoded"


def carries_key(request: HttpRequest) -> bool:
    """A key in the header (even an empty one: @idempotent answers it 400), or in an
    urlencoded form post's ``idempotency_key`` field."""
    policy = _OPTIONS.resolve(request)
    if is_form_post(request, policy):
        return request.content_type == URLENCODED and form_field(request, FIELD_NAME) is not None
    return carries_header(request)


def carries_header(request: HttpRequest) -> bool:
    """A key in the header: where DRF's and Ninja's adapters read it."""
    policy = _OPTIONS.resolve(request)
    if policy.meta_header:
        return policy.meta_header in request.META
    return policy.header in request.headers


def _protected(view: Call, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
    call = functools.partial(view, request, *args, **kwargs)
    return handle(request, _OPTIONS, functools.partial(_under_claim, request, call))


def _protected_async(view: Call, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
    # As @idempotent's async wrapper: the protocol holds a transaction on this thread,
    # the view runs on the event loop through async_to_sync.
    call = functools.partial(async_to_sync(view), request, *args, **kwargs)
    return handle(request, _OPTIONS, functools.partial(_under_claim, request, call))


def _under_claim(request: HttpRequest, call: Callable[[], HttpResponse]) -> HttpResponse:
    """Run the view under the switch's claim, marked so that a protection of this same
    request inside it (one the middleware could not see) takes it over: it raises
    ``SwitchDeferred`` where it begins, before the view it protects runs."""
    setattr(request, SWITCH_CLAIMED, True)
    try:
        return call()
    finally:
        with contextlib.suppress(AttributeError):
            delattr(request, SWITCH_CLAIMED)


def _answer(response: Any) -> HttpResponse:
    """A view's answer; an ``async`` one's awaited (process_view is synchronous)."""
    if isawaitable(response):
        return async_to_sync(_awaited)(response)
    return response  # type: ignore[no-any-return]


async def _awaited(awaitable: Awaitable[HttpResponse]) -> HttpResponse:
    return await awaitable


def _exempt(view: Callable[..., Any]) -> bool:
    """Marked ``@idempotency_exempt``: the view, or the class its ``as_view()`` came from."""
    classes = (getattr(view, "view_class", None), getattr(view, "cls", None))
    return getattr(view, EXEMPT, False) or any(getattr(c, EXEMPT, False) for c in classes)


def _protects_itself(view: object) -> bool:
    # @idempotent and the mixins' as_view() mark their view with the entries' database.
    return isinstance(getattr(view, "_non_atomic_requests", None), EntriesDatabase)


# The execution contexts of the GraphQL adapters (by name: neither stack is imported here).
_GRAPHQL_CONTEXTS = {
    ("idempotency_django.strawberry", "IdempotentExecutionContext"),
    ("idempotency_django.graphene", "IdempotentExecutionContext"),
}


def _protected_below(request: HttpRequest, view: Callable[..., Any]) -> bool:
    """Whether ``view`` protects this request below its URL's view function: a class
    view's handler (``@method_decorator(idempotent)``), a ModelAdmin with
    ``IdempotentAdminMixin``, a GraphQL view whose fields the adapters protect. Left to
    it, with its own options and keys (its fields' ``idempotencyKey`` arguments)."""
    cls = getattr(view, "view_class", None)
    if isinstance(cls, type):
        method = (request.method or "").lower()
        if _protects_itself(getattr(cls, method, None)) or _protects_itself(
            getattr(cls, "dispatch", None)
        ):
            return True
        if _graphql_protected(cls, getattr(view, "view_initkwargs", None) or {}):
            return True
    model_admin = getattr(view, "model_admin", None)
    if model_admin is not None:
        from idempotency_django.admin import IdempotentAdminMixin

        return isinstance(model_admin, IdempotentAdminMixin)
    return False


def _graphql_protected(cls: type, initkwargs: dict[str, Any]) -> bool:
    """A GraphQL view (Strawberry's, graphene-django's) executing with our context."""
    schema = initkwargs.get("schema", getattr(cls, "schema", None))
    contexts = (
        initkwargs.get("execution_context_class"),
        getattr(cls, "execution_context_class", None),
        getattr(schema, "execution_context_class", None),
    )
    return any(
        (base.__module__, base.__qualname__) in _GRAPHQL_CONTEXTS
        for context in contexts
        if isinstance(context, type)
        for base in context.__mro__
    )


# --- Django REST framework: the view's class with IdempotentMixin in front ---------------------


def _drf_class(view: Callable[..., Any]) -> type | None:
    """The DRF view class behind ``view`` (``as_view()`` and ``@api_view`` set ``view.cls``).

    Read by module name, so that a project without DRF never imports it.
    """
    cls = getattr(view, "cls", None)
    if isinstance(cls, type) and any(
        base.__module__.startswith("rest_framework.") for base in cls.__mro__
    ):
        return cls
    return None


def _drf_protection(request: HttpRequest, view: Call, cls: type) -> Call | None:
    from idempotency_django.rest_framework import IdempotentMixin

    if issubclass(cls, IdempotentMixin):
        return None
    if _drf_handler_protects_itself(request, view, cls) or not carries_header(request):
        return None
    protected = _DRF_VIEWS.get(view)
    if protected is None:
        protected = _DRF_VIEWS[view] = _drf_view(view, cls)
    return protected


def _drf_handler_protects_itself(request: HttpRequest, view: Call, cls: type) -> bool:
    """``@idempotent`` under ``@api_view`` (or on a handler): the handler protects itself."""
    method = (request.method or "").lower()
    actions = getattr(view, "actions", None) or {}
    handler = getattr(cls, actions.get(method, method), None)
    # @api_view's handler calls the function it closes over: the one @idempotent marked.
    return _protects_itself(handler) or any(_protects_itself(c) for c in _closed_over(handler))


def _closed_over(function: object) -> list[object]:
    """What ``function``'s closure holds (its free variables' values)."""
    contents = []
    for cell in getattr(function, "__closure__", None) or ():
        with contextlib.suppress(ValueError):  # an empty cell
            contents.append(cell.cell_contents)
    return contents


def _drf_view(view: Call, cls: type) -> Call:
    """``view`` as ``as_view()`` of ``cls`` with ``IdempotentMixin`` in front would make it:
    DRF authenticates, checks permissions and throttles before the claim, as the mixin does."""
    initkwargs = dict(getattr(view, "initkwargs", {}))
    actions = getattr(view, "actions", None)
    protected_cls = _drf_protected_class(cls)
    as_view: Any = protected_cls.as_view  # type: ignore[attr-defined]
    return as_view(actions, **initkwargs) if actions is not None else as_view(**initkwargs)  # type: ignore[no-any-return]


@functools.cache
def _drf_protected_class(cls: type) -> type:
    from idempotency_django.rest_framework import IdempotentMixin

    namespace = {"__module__": cls.__module__, "__qualname__": cls.__qualname__}
    return type(cls.__name__, (IdempotentMixin, cls), namespace)


# --- Django Ninja: the operation's function protected, inside the operation ---------------------


def _is_ninja(view: Callable[..., Any]) -> bool:
    view = view.func if isinstance(view, functools.partial) else view  # Ninja's docs views
    return str(getattr(view, "__module__", "")).startswith("ninja.")


def _ninja_operation(request: HttpRequest, view: Callable[..., Any]) -> Operation | None:
    """The Ninja operation that answers this request, if ``view`` is Ninja's path view.

    Ninja's URL patterns hold a closure over (older versions: a method of) the
    ``PathView`` that finds the operation of the request's method.
    """
    if not _is_ninja(view):
        return None
    from ninja.operation import PathView

    owners = [getattr(view, "__self__", None), *_closed_over(view)]
    path_view = next((owner for owner in owners if isinstance(owner, PathView)), None)
    if path_view is None:
        return None
    method = request.method
    return next((op for op in path_view.operations if method in op.methods), None)


def _ninja_protection(request: HttpRequest, operation: Operation) -> Call | None:
    from idempotency_django import ninja as adapter

    function = operation.view_func
    if getattr(function, EXEMPT, False) or hasattr(function, adapter._PROTECTED):
        return None
    if operation.stream_format or not carries_header(request):
        return None
    run = _NINJA_RUNS.get(operation)
    if run is None:
        run = _NINJA_RUNS[operation] = _ninja_run(operation)
    return run


def _ninja_run(operation: Operation) -> Call:
    """A copy of ``operation`` whose function is protected as Ninja's ``@idempotent``
    protects it: Ninja authenticates, throttles and validates before the claim, and the
    key space is ``request.auth``. The API's own operation is left as it is."""
    from idempotency_django import ninja as adapter

    twin = operation.clone()
    twin.api = operation.api
    twin.view_func = adapter._protected(operation.view_func, _OPTIONS)
    # The protected function renders its result through the operation it finds on the request.
    run: Call = adapter._remembering(twin.run, twin)
    return run


# idempotency_exempt is public from the package itself (SPEC: from idempotency_django import ...).
__all__ = ["IdempotencyMiddleware"]
