"""``GET …/keys/<key>/``: what became of the caller's own key (off unless included).

``path("idempotency/", include("idempotency_django.urls"))`` mounts it. The
tenant is resolved as ``@idempotent``'s default resolves it
(``IDEMPOTENCY_TENANT_RESOLVER``: the Django user, or whatever names a deployment's
callers), and a caller it names no tenant for is refused (401): a key is only ever
looked up in its caller's own key space, so another tenant's key is as unknown as a
key never sent (404), and no answer tells the two apart. Every answer is
``Cache-Control: private, no-store``.

The stored answer itself is never part of the reply: to get it, a client sends
its request again with the same key and gets the replay (docs/http.rst).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar

from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.views import View as DjangoView
from django.views.decorators.http import require_safe

from idempotency_django._adapters.decorators import EntriesDatabase, handle
from idempotency_django._conf import conf
from idempotency_django._protocol.core import store_errors
from idempotency_django._protocol.keys import parse_key
from idempotency_django._protocol.options import Options
from idempotency_django._protocol.responses import problem_response
from idempotency_django.databases import entries_alias
from idempotency_django.exceptions import IdempotencyError, KeyUnknown, NotAuthenticated
from idempotency_django.forms import require_first
from idempotency_django.lookup import KeyStatus, lookup

# Per caller and changing, refusals included: never from a shared cache, never kept.
PRIVATE = "private, no-store"
# Django's authentication knows sessions (and what middleware sets as request.user), not the
# credentials of an Authorization header: a caller sending one is told where those are read.
_ELSEWHERE = (
    " This view knows the callers Django authenticates (a session login, request.user) "
    "and those IDEMPOTENCY_TENANT_RESOLVER names; for DRF's authentication (a token, "
    "HTTP Basic) mount idempotency_django.rest_framework_keys.KeyStatusView, for Django "
    "Ninja's idempotency_django.ninja_keys.key_router() (docs/http.rst)."
)

View = Callable[..., HttpResponseBase]
AnyResponse = TypeVar("AnyResponse", bound=HttpResponseBase)


def private(response: AnyResponse) -> AnyResponse:
    """``response`` marked ``Cache-Control: private, no-store``; returned for chaining."""
    response["Cache-Control"] = PRIVATE
    return response


def never_cached(view: View) -> View:
    """Every answer of ``view`` private (the 401, the 404, the 405 … as much as the 200)."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        return private(view(request, *args, **kwargs))

    return wrapper


@never_cached
@require_safe
def key_status(request: HttpRequest, key: str) -> HttpResponse:
    """The caller's key's :class:`~idempotency_django.lookup.KeyStatus` as JSON, or 401/404."""
    told = NotAuthenticated.default_detail + (
        _ELSEWHERE if "Authorization" in request.headers else ""
    )
    try:
        found = caller_key_status(
            request, key, lambda: conf.TENANT_RESOLVER(request), unauthenticated=told
        )
    except IdempotencyError as error:
        return problem_response(error)
    return status_response(found)


def caller_key_status(
    request: HttpRequest,
    raw_key: str,
    tenant: Callable[[], str],
    challenge: str | None = None,
    unauthenticated: str | None = None,
) -> KeyStatus:
    """The status of ``raw_key`` in the key space ``tenant()`` names; the one rule behind
    the Django, DRF and Ninja lookups (each knows its own caller). An empty tenant is no
    caller: :class:`NotAuthenticated` (``unauthenticated`` its detail, ``challenge`` its
    ``WWW-Authenticate`` where the stack knows one). Also raises ``KeyMalformed``,
    ``StoreUnavailable`` or :class:`KeyUnknown`.
    """
    # The entries' database unreachable (a resolver may read it too): 503, as for a view.
    with store_errors():
        # Not "is there a Django user": a deployment may name its callers otherwise (a
        # gateway's header), and the key space is the tenant, whoever resolves it.
        owner = tenant()
        if not owner:
            raise NotAuthenticated(unauthenticated, challenge=challenge)
        key = parse_key(raw_key, conf.KEY_MAX_LENGTH)
        found = lookup(key, tenant=owner, using=entries_alias(None, request))
    if found is None:
        raise KeyUnknown()
    return found


def status_response(found: KeyStatus) -> HttpResponse:
    response = JsonResponse(found.as_json())
    if found.retry_after is not None:
        response["Retry-After"] = str(found.retry_after)
    private(response)
    return response


# --- Django's generic editing views (docs/forms.rst) ---------------------------------------------


class IdempotentFormMixin:
    """Run a form's post once per key: for ``CreateView``, ``UpdateView``, ``DeleteView``
    and ``FormView`` (``class OrderCreate(IdempotentFormMixin, CreateView)``).

    The key is the form's ``idempotency_key`` field (``{% idempotency_key_field %}``)
    or the ``Idempotency-Key`` header, looked up before the form is validated; the
    answer stored and replayed is the post's, usually ``form_valid``'s redirect. A
    form shown again with its errors is not stored: nothing was done. Options are
    ``@idempotent``'s keywords in ``idempotency_options``; the view's
    authentication (``LoginRequiredMixin``, ``dispatch()``) runs before it.
    """

    idempotency_options: ClassVar[Mapping[str, Any]] = {}
    _IDEMPOTENT_FORM_VIEWS: ClassVar[list[type]] = []  # W090: forms in use

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        require_first(cls, IdempotentFormMixin, DjangoView, "CreateView")
        IdempotentFormMixin._IDEMPOTENT_FORM_VIEWS.append(cls)

    @classmethod
    def get_idempotency_options(cls) -> Options:
        """The view's options; a wrong one is ``ImproperlyConfigured`` when the URLconf loads."""
        try:
            return Options.build(**cls.idempotency_options)
        except TypeError as exc:
            raise ImproperlyConfigured(f"{cls.__qualname__}.idempotency_options: {exc}") from exc

    @classmethod
    def as_view(cls, **initkwargs: Any) -> Any:
        parent: Any = super()
        view = parent.as_view(**initkwargs)
        # As @idempotent's: the claim's transaction is the view's, even under ATOMIC_REQUESTS.
        marker = EntriesDatabase(cls.get_idempotency_options())
        marker.others.update(getattr(view, "_non_atomic_requests", ()))
        view._non_atomic_requests = marker
        return view

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        # The whole post, not form_valid(): the key is looked up before the form is
        # validated, so a reload gets the stored answer even where the form would no
        # longer validate (its unique value now taken, its object deleted: a 404).
        parent: Any = super()
        options = self.get_idempotency_options()
        return handle(request, options, lambda: parent.post(request, *args, **kwargs))


__all__ = ["IdempotentFormMixin"]
