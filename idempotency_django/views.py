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

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_safe

from idempotency_django.conf import conf
from idempotency_django.core import store_errors
from idempotency_django.databases import entries_alias
from idempotency_django.exceptions import IdempotencyError, KeyUnknown, NotAuthenticated
from idempotency_django.keys import parse_key
from idempotency_django.lookup import KeyStatus, lookup
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
