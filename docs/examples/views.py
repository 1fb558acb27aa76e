"""The quick start's views: a protected function view and a protected class-based view."""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404
from django.utils.decorators import method_decorator
from django.views import View
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from idempotency_django import IdempotentRequest, idempotent

from .models import Charge, Refund


def _amount(request: HttpRequest) -> int | None:
    try:
        amount = int(json.loads(request.body)["amount"])
    except (ValueError, KeyError, TypeError):
        return None
    return amount if amount > 0 else None


# csrf_exempt: this endpoint is for API clients (curl, mobile apps), which send no CSRF
# token. A view that browsers post to keeps CSRF protection (see the quick start).
@csrf_exempt
@require_POST
@idempotent
def create_charge(request: IdempotentRequest) -> HttpResponse:
    amount = _amount(request)
    if amount is None:
        # A final 4xx: stored and replayed, like a success.
        return JsonResponse({"error": 'send JSON like {"amount": 1000}'}, status=400)
    charge = Charge.objects.create(
        amount=amount,
        provider_key=request.idempotency.derive("provider"),
    )
    response = JsonResponse({"id": charge.pk, "amount": charge.amount}, status=201)
    response["Location"] = f"/charges/{charge.pk}/"
    return response


@require_GET
def charge_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """Where ``Location`` points: reads need no key."""
    charge = get_object_or_404(Charge, pk=pk)
    return JsonResponse({"id": charge.pk, "amount": charge.amount})


@method_decorator(csrf_exempt, name="dispatch")
@method_decorator(idempotent(ttl=3600), name="dispatch")
class RefundView(View):
    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        charge = get_object_or_404(Charge, pk=kwargs["pk"])
        amount = _amount(request)
        if amount is None or amount > charge.amount:
            return JsonResponse(
                {"error": "amount must be positive, at most the charge"}, status=400
            )
        refund = Refund.objects.create(charge=charge, amount=amount)
        return JsonResponse({"id": refund.pk, "charge": charge.pk, "amount": amount}, status=201)
