"""A Django Ninja API of charges (``payments/ninja_api.py``), API-key authenticated."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest
from ninja import NinjaAPI, Schema, Status
from ninja.security import APIKeyHeader

from idempotency_django.ninja import idempotent

from .models import Charge


class ApiKey(APIKeyHeader):
    param_name = "X-API-Key"

    def authenticate(self, request: HttpRequest, key: str | None) -> str | None:
        # The key is the principal: each API key has a key space of its own.
        return key if key in settings.PAYMENTS_API_KEYS else None


class ChargeIn(Schema):
    amount: int


class ChargeOut(Schema):
    id: int
    amount: int


api = NinjaAPI(auth=ApiKey(), urls_namespace="payments-ninja")


@api.post("/charges", response={201: ChargeOut})
@idempotent  # directly under the operation decorator
def create_charge(request: HttpRequest, payload: ChargeIn) -> Status[Any]:
    charge = Charge.objects.create(
        amount=payload.amount, provider_key=request.idempotency.derive("provider")
    )
    return Status(201, charge)


@api.post("/async/charges", response={201: ChargeOut})
@idempotent  # the same decorator on an async operation
async def create_charge_async(request: HttpRequest, payload: ChargeIn) -> Status[Any]:
    # Awaited ORM calls run inside the claim's transaction, as the sync operation's do.
    charge = await Charge.objects.acreate(
        amount=payload.amount, provider_key=request.idempotency.derive("provider")
    )
    return Status(201, charge)
