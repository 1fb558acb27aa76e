"""Protected views of a sharded project, and the issue's two-databases mistake."""

from __future__ import annotations

import json
import time

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from idempotency_django import idempotent, idempotent_call
from idempotency_django.databases import uncovered
from idempotency_django.rest_framework import IdempotentMixin
from tests.multidb.routing import shard
from tests.testapp.models import Charge


def _amount(request: HttpRequest) -> int:
    return int(json.loads(request.body or b"{}").get("amount", 1))


@idempotent  # IDEMPOTENCY_DATABASE is tests.multidb.routing.shard
def sharded_charge(request: HttpRequest) -> HttpResponse:
    # The tenant router sends the business row to the tenant's shard.
    charge = Charge.objects.create(reference=request.headers["X-Ref"], amount=_amount(request))
    time.sleep(float(json.loads(request.body or b"{}").get("sleep", 0)))
    return JsonResponse({"id": charge.pk, "shard": charge._state.db}, status=201)


class ShardedChargeAPI(IdempotentMixin, APIView):
    authentication_classes = ()
    permission_classes = ()
    idempotency_database = staticmethod(shard)

    def get_idempotency_tenant(self, request: Request) -> str:
        return str(request.headers.get("X-Tenant", ""))

    def post(self, request: Request) -> Response:
        charge = Charge.objects.create(reference=request.headers["X-Ref"], amount=1)
        return Response({"shard": charge._state.db}, status=201)


@idempotent(database="default")
def charge_on_the_other_database(request: HttpRequest) -> HttpResponse:
    """The issue's case: the entry in default, the charge in shard1, then a 500."""
    Charge.objects.using("shard1").create(reference=request.headers["X-Ref"], amount=1)
    return JsonResponse({"error": "downstream failed"}, status=500)


@idempotent(database="default")
async def async_charge_on_the_other_database(request: HttpRequest) -> HttpResponse:
    """The same mistake in an async view."""
    create = sync_to_async(Charge.objects.using("shard1").create)
    await create(reference=request.headers["X-Ref"], amount=1)
    return JsonResponse({"error": "downstream failed"}, status=500)


@idempotent(database="default")
def nested_call_on_the_other_database(request: HttpRequest) -> HttpResponse:
    """A call protected by its own key on shard1: covered, not an uncovered write."""
    ref = request.headers["X-Ref"]
    with idempotent_call(ref, scope="ledger", database="shard1") as call:
        if not call.replayed:
            Charge.objects.using("shard1").create(reference=ref, amount=1)
            call.result = "ok"
    return JsonResponse({}, status=201)


@idempotent(database="default")
def audit_on_the_other_database(request: HttpRequest) -> HttpResponse:
    with uncovered("shard1"):  # an audit line may repeat: knowingly outside the key
        Charge.objects.using("shard1").create(reference=request.headers["X-Ref"], amount=0)
    Charge.objects.using("default").create(reference=request.headers["X-Ref"], amount=1)
    return JsonResponse({}, status=201)


@idempotent(database="default")
def replica_charge(request: HttpRequest) -> HttpResponse:
    charge = Charge.objects.create(reference=request.headers["X-Ref"], amount=_amount(request))
    return JsonResponse({"id": charge.pk}, status=201)
