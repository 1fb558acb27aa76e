"""A protected view that sends its receipt through the outbox (``ROOT_URLCONF`` of the outbox tests)."""

from __future__ import annotations

import json

from django.contrib import admin
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

from idempotency_django import idempotent
from idempotency_django.outbox import enqueue
from tests.testapp.models import Charge


@csrf_exempt
@idempotent
def charge_with_receipt(request: HttpRequest) -> HttpResponse:
    data = json.loads(request.body or b"{}")
    reference = str(data["reference"])
    charge = Charge.objects.create(reference=reference, amount=int(data.get("amount", 100)))
    # Keyed by request.idempotency.derive(); "receipts": n enqueues the task n times.
    keys = [enqueue("tests.receipt", reference) for _ in range(int(data.get("receipts", 1)))]
    if data.get("fail"):
        return JsonResponse({"error": "the provider said no"}, status=503)
    return JsonResponse({"id": charge.pk, "receipt_key": keys[0], "receipt_keys": keys}, status=201)


urlpatterns = [
    path("outbox/charges/", charge_with_receipt, name="outbox-charge"),
    path("admin/", admin.site.urls),
]
