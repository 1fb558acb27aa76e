"""A protected view that enqueues a ``django.tasks`` task through the outbox (``@pytest.mark.urls``)."""

from __future__ import annotations

import json

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path
from django.utils.module_loading import import_string
from django.views.decorators.csrf import csrf_exempt

from idempotency_django import idempotent
from idempotency_django.outbox import enqueue
from tests.testapp.models import Charge


@csrf_exempt
@idempotent
def order(request: HttpRequest) -> HttpResponse:
    data = json.loads(request.body or b"{}")
    reference = str(data["reference"])
    Charge.objects.create(reference=f"order-{reference}", amount=1)
    key = enqueue(import_string(f"tests.dj_tasks.{data['task']}"), f"receipt-{reference}")
    if data.get("fail"):
        return JsonResponse({"error": "the provider said no"}, status=503)
    return JsonResponse({"receipt_key": key}, status=201)


urlpatterns = [path("tasks/orders/", order, name="tasks-order")]
