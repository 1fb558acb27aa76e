"""Views the tests protect; the JSON body steers what the view does."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.decorators import method_decorator
from django.views import View

from idempotency_django import idempotent
from tests.gates import hold_here
from tests.testapp.models import Charge


def _body(request: HttpRequest) -> dict[str, Any]:
    if request.content_type == "multipart/form-data":
        return request.POST.dict()
    try:
        data = json.loads(request.body or b"{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def make_charge(request: HttpRequest) -> HttpResponse:
    data = _body(request)
    context = getattr(request, "idempotency", None)
    reference = context.key if context and context.key else str(data.get("reference", ""))
    charge = Charge.objects.create(reference=reference, amount=int(data.get("amount", 100)))
    if data.get("hold"):  # the test's gate (tests.gates), armed for this key
        hold_here(reference)
    if data.get("sleep"):
        time.sleep(float(data["sleep"]))
    if data.get("raise"):
        raise RuntimeError("the view failed after writing")
    status = int(data.get("status", 201))
    response = JsonResponse(
        {"id": charge.pk, "amount": charge.amount, "tenant": context.tenant if context else None},
        status=status,
    )
    response["Location"] = f"/charges/{charge.pk}"
    response["X-Charge-Id"] = str(charge.pk)
    response.set_cookie("session-ish", "secret")
    return response


charge = idempotent(make_charge)
charge_short_lease = idempotent(lease=0.5)(make_charge)
charge_optional = idempotent(required=False)(make_charge)
charge_put_only = idempotent(methods=["PUT"])(make_charge)


@idempotent(key=lambda request: _body(request).get("event_id"), tenant=lambda request: "stripe")
def webhook(request: HttpRequest) -> HttpResponse:
    Charge.objects.create(reference=str(_body(request)["event_id"]), amount=0)
    return HttpResponse(status=204)


@idempotent
def binary(request: HttpRequest) -> HttpResponse:
    Charge.objects.create(reference=request.idempotency.key, amount=1)  # type: ignore[attr-defined]
    return HttpResponse(bytes(range(256)) * 4, content_type="application/octet-stream")


@idempotent
def derive(request: HttpRequest) -> HttpResponse:
    context = request.idempotency  # type: ignore[attr-defined]
    return JsonResponse(
        {
            "payments": context.derive("payments"),
            "email": context.derive("email"),
            "replayed": context.replayed,
        }
    )


@method_decorator(idempotent, name="dispatch")
class ChargeView(View):
    def get(self, request: HttpRequest) -> HttpResponse:
        return JsonResponse({"charges": Charge.objects.count()})

    def post(self, request: HttpRequest) -> HttpResponse:
        return make_charge(request)


@idempotent
async def async_charge(request: HttpRequest) -> HttpResponse:
    await asyncio.sleep(0)
    key = request.idempotency.key  # type: ignore[attr-defined]
    charge = await sync_to_async(Charge.objects.create)(reference=key, amount=5)
    return JsonResponse({"id": charge.pk}, status=201)
