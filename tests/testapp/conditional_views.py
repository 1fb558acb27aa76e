"""A protected PATCH with an ``If-Match`` precondition; a Charge's amount is its version."""

from __future__ import annotations

import json

from django.db.models import F
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

from idempotency_django import idempotent
from idempotency_django.conditional import check_if_match, etag, if_match, version_of
from tests.testapp.models import Charge


def locked_version(request: HttpRequest, pk: int) -> int | None:
    charge = Charge.objects.select_for_update().filter(pk=pk).first()
    return None if charge is None else charge.amount


@csrf_exempt
@idempotent(methods=["PATCH", "PUT", "DELETE"])
@if_match(locked_version)
def patch_charge(request: HttpRequest, pk: int) -> HttpResponse:
    """Renames the charge and bumps its version (its amount) by one."""
    data = json.loads(request.body or b"{}")
    Charge.objects.filter(pk=pk).update(reference=data.get("reference", ""), amount=F("amount") + 1)
    charge = Charge.objects.get(pk=pk)
    response = JsonResponse({"reference": charge.reference, "version": charge.amount})
    response["ETag"] = etag(charge.amount)
    return response


@csrf_exempt
@idempotent(methods=["PUT"], required=False)
def put_charge(request: HttpRequest, pk: int) -> HttpResponse:
    """The same with the helper inline; a missing If-Match is allowed here."""
    charge = Charge.objects.select_for_update().get(pk=pk)
    refused = check_if_match(request, etag(charge.amount), required=False)
    if refused is not None:
        return refused
    Charge.objects.filter(pk=pk).update(amount=F("amount") + 1)
    return HttpResponse(status=204, headers={"ETag": etag(charge.amount + 1)})


@csrf_exempt
@idempotent(methods=["DELETE"])
@if_match(version_of(Charge.objects.all(), "amount", kwarg="pk"))
def delete_charge(request: HttpRequest, pk: int) -> HttpResponse:
    Charge.objects.filter(pk=pk).delete()
    return HttpResponse(status=204)


urlpatterns = [
    path("conditional/delete/<int:pk>/", delete_charge),
    path("conditional/charges/<int:pk>/", patch_charge),
    path("conditional/put/<int:pk>/", put_charge),
]
