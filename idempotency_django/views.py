"""``GET …/keys/<key>/``: what became of the caller's own key (off unless included).

``path("idempotency/", include("idempotency_django.urls"))`` mounts it. The
tenant is resolved as ``@idempotent``'s default resolves it
(``IDEMPOTENCY_TENANT_RESOLVER``), for authenticated callers only: a key is
only ever looked up in its caller's own key space, so another tenant's key is as
unknown as a key never sent (404), and no answer tells the two apart.

The stored answer itself is never part of the reply: to get it, a client sends
its request again with the same key and gets the replay (docs/http.rst).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_safe
from django.views.generic.edit import BaseDeleteView

from idempotency_django.conf import conf
from idempotency_django.core import store_errors
from idempotency_django.databases import entries_alias
from idempotency_django.decorators import EntriesDatabase, handle
from idempotency_django.exceptions import IdempotencyError, KeyUnknown, NotAuthenticated
from idempotency_django.keys import parse_key
from idempotency_django.lookup import KeyStatus, lookup
from idempotency_django.options import Options, check_option_names
from idempotency_django.responses import problem_response


@require_safe
def key_status(request: HttpRequest, key: str) -> HttpResponse:
    """The caller's key's :class:`~idempotency_django.lookup.KeyStatus` as JSON, or 401/404."""
    user = getattr(request, "user", None)
    authenticated = user is not None and user.is_authenticated
    try:
        found = caller_key_status(
            request, key, authenticated, lambda: conf.TENANT_RESOLVER(request)
        )
    except IdempotencyError as error:
        return problem_response(error)
    return status_response(found)


def caller_key_status(
    request: HttpRequest,
    raw_key: str,
    authenticated: bool,
    tenant: Callable[[], str],
    challenge: str | None = None,
) -> KeyStatus:
    """The status of ``raw_key`` in the key space ``tenant()`` names, for an authenticated
    caller; the one rule behind the Django, DRF and Ninja lookups (each knows its own
    caller). Raises :class:`NotAuthenticated` (with ``challenge`` as its
    ``WWW-Authenticate``, where the stack knows one), ``KeyMalformed``,
    ``StoreUnavailable`` or :class:`KeyUnknown`.
    """
    if not authenticated:
        raise NotAuthenticated(challenge=challenge)
    key = parse_key(raw_key, conf.KEY_MAX_LENGTH)
    with store_errors():  # the entries' database unreachable: 503, as for a protected view
        found = lookup(key, tenant=tenant(), using=entries_alias(None, request))
    if found is None:
        raise KeyUnknown()
    return found


def status_response(found: KeyStatus) -> HttpResponse:
    response = JsonResponse(found.as_json())
    if found.retry_after is not None:
        response["Retry-After"] = str(found.retry_after)
    # Per caller and changing: never from a shared cache.
    response["Cache-Control"] = "private, no-store"
    return response


# --- Django's generic editing views (docs/forms.rst) ---------------------------------------------


class IdempotentFormMixin:
    """Run ``form_valid`` once per key: for ``CreateView``, ``UpdateView``, ``DeleteView``
    and ``FormView`` (``class OrderCreate(IdempotentFormMixin, CreateView)``).

    The key is the form's ``idempotency_key`` field (``{% idempotency_key_field %}``)
    or the ``Idempotency-Key`` header; the answer stored and replayed is
    ``form_valid``'s, usually the redirect. A form that does not validate is
    answered as usual, unprotected and unstored: nothing was done. Options are
    ``@idempotent``'s keywords in ``idempotency_options``; the view's
    authentication (``LoginRequiredMixin``, ``dispatch()``) runs before it.
    """

    idempotency_options: ClassVar[Mapping[str, Any]] = {}
    _IDEMPOTENT_FORM_VIEWS: ClassVar[list[type]] = []  # W090: forms in use

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        IdempotentFormMixin._IDEMPOTENT_FORM_VIEWS.append(cls)

    @classmethod
    def get_idempotency_options(cls) -> Options:
        """The view's options; a wrong one is ``ImproperlyConfigured`` when the URLconf loads."""
        try:
            check_option_names(cls.idempotency_options)
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
        parent: Any = super()
        if not isinstance(self, BaseDeleteView):
            return parent.post(request, *args, **kwargs)  # type: ignore[no-any-return]
        # A delete looks its object up before form_valid(): a reload after the delete
        # would be a 404. The whole post is protected instead (its form is always valid).
        self._idempotency_whole_post = True
        options = self.get_idempotency_options()
        return handle(request, options, lambda: parent.post(request, *args, **kwargs))

    def form_valid(self, form: Any) -> HttpResponse:
        parent: Any = super()
        if getattr(self, "_idempotency_whole_post", False):
            return parent.form_valid(form)  # type: ignore[no-any-return]
        request: HttpRequest = getattr(self, "request")  # noqa: B009  (set by View.setup)
        return handle(request, self.get_idempotency_options(), lambda: parent.form_valid(form))
