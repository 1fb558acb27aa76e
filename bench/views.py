"""One business write, served unprotected and protected, so the difference is ours."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse

from idempotency_django import idempotent
from tests.testapp.models import Charge


def unprotected(request: HttpRequest) -> HttpResponse:
    """The business write alone: one INSERT in its own (autocommit) transaction."""
    return _charge(request, "default")


def unprotected_prepared(request: HttpRequest) -> HttpResponse:
    """The same through the "prepared" alias (server-side binding, prepared statements)."""
    return _charge(request, "prepared")


def _charge(request: HttpRequest, using: str) -> HttpResponse:
    reference = request.headers.get("Idempotency-Key", "")
    charge = Charge.objects.using(using).create(reference=reference, amount=100)
    return JsonResponse({"id": charge.pk, "amount": charge.amount}, status=201)


protected = idempotent(unprotected)


@idempotent
def protected_outbox(request: HttpRequest) -> HttpResponse:
    """The protected view plus one ``enqueue()`` (bench/outbox.py)."""
    from idempotency_django.outbox import enqueue

    response = _charge(request, "default")
    enqueue("bench.receipt", request.headers.get("Idempotency-Key", ""))
    return response


protected_cached = idempotent(cache="replay")(unprotected)
protected_prepared = idempotent(database="prepared")(unprotected_prepared)


def ping(request: HttpRequest) -> HttpResponse:
    """Readiness of the server, without touching the database."""
    return HttpResponse(status=204)
