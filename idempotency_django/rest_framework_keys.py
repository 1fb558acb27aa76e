"""The key lookup as a DRF view: ``path("idempotency/keys/<path:key>/", KeyStatusView.as_view())``.

DRF authenticates the caller (token, session, …, the view's or the project's
``DEFAULT_AUTHENTICATION_CLASSES``); the tenant is what
:class:`~idempotency_django.rest_framework.IdempotentMixin` resolves by default.
Imports DRF: import it only where DRF is installed.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse

from idempotency_django._adapters.extras import raise_missing_extra

try:
    import rest_framework  # noqa: F401
except ModuleNotFoundError as error:  # pragma: no cover  (tested in a subprocess)
    raise_missing_extra(error, __name__, "drf")
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from idempotency_django._conf import conf
from idempotency_django._protocol.responses import problem_response
from idempotency_django.exceptions import IdempotencyError
from idempotency_django.views import caller_key_status, private, status_response


class KeyStatusView(APIView):
    """``GET``: the caller's key's status; 401 problem+json without a caller, 404 unknown.

    Every answer, DRF's own refusals included, is ``Cache-Control: private, no-store``.
    """

    def get_idempotency_tenant(self, request: Request) -> str:
        """Whose key space to look in: the mixin's default (override both alike)."""
        return conf.TENANT_RESOLVER(request)

    def get_authenticate_header(self, request: Request) -> str | None:  # type: ignore[override]
        """The first challenge of the view's authentication classes.

        DRF asks the first class only; its defaults put ``SessionAuthentication``, which
        has none, before ``BasicAuthentication``. A 401 carries a challenge (RFC 9110
        §11.6.1) whenever any class has one.
        """
        challenges = (a.authenticate_header(request) for a in self.get_authenticators())
        return next((c for c in challenges if c), None)

    def get(self, request: Request, key: str, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            found = caller_key_status(
                request._request,
                key,
                lambda: self.get_idempotency_tenant(request),
                # DRF's own challenge ("Token", "Basic realm=…"), as its 401s carry.
                challenge=self.get_authenticate_header(request),
            )
        except IdempotencyError as error:
            return problem_response(error)
        return status_response(found)

    def finalize_response(
        self, request: Request, response: Response, *args: Any, **kwargs: Any
    ) -> Response:
        return private(super().finalize_response(request, response, *args, **kwargs))


__all__ = ["KeyStatusView"]
