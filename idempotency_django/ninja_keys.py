"""The key lookup as a Django Ninja router: ``api.add_router("/idempotency/", key_router())``.

The caller is the principal the router's (or the API's) ``auth`` authenticated;
its key space is the one :func:`idempotency_django.ninja.idempotent` uses for it.
Imports Ninja: import it only where Ninja is installed.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse

from idempotency_django._adapters.extras import raise_missing_extra

try:
    import ninja  # noqa: F401
except ModuleNotFoundError as error:  # pragma: no cover  (tested in a subprocess)
    raise_missing_extra(error, __name__, "ninja")
from ninja import Router
from ninja.constants import NOT_SET
from ninja.decorators import decorate_view

from idempotency_django import ninja as adapter
from idempotency_django._protocol.responses import problem_response
from idempotency_django.databases import entries_alias
from idempotency_django.exceptions import IdempotencyError
from idempotency_django.views import caller_key_status, never_cached, status_response


def key_router(*, auth: Any = NOT_SET) -> Router:
    """A router serving ``GET keys/{key}/``; ``auth`` as Ninja's (default: the API's)."""
    router = Router(auth=auth)

    @router.get("/keys/{path:key}/", include_in_schema=True, url_name="idempotency-key-status")
    @decorate_view(never_cached)  # Ninja's own 401 too: it wraps the operation's auth
    def key_status(request: HttpRequest, key: str) -> HttpResponse:
        using = entries_alias(None, request)
        try:
            found = caller_key_status(request, key, lambda: adapter.tenant(request, None, using))
        except IdempotencyError as error:
            return problem_response(error)
        return status_response(found)

    return router


__all__ = ["key_router"]
