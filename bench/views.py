"""One business write, served unprotected and protected, so the difference is ours."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse

from idempotency_django import idempotent
from tests.testapp.models import Charge


def unprotected(request: HttpRequest) -> HttpResponse:
    """The business write alone: one INSERT in its own (autocommit) transaction."""
    charge = Charge.objects.create(reference=request.headers.get("Idempotency-Key", ""), amount=100)
    return JsonResponse({"id": charge.pk, "amount": charge.amount}, status=201)


protected = idempotent(unprotected)
protected_cached = idempotent(cache="replay")(unprotected)


def ping(request: HttpRequest) -> HttpResponse:
    """Readiness of the server, without touching the database."""
    return HttpResponse(status=204)
