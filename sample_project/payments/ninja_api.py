"""The Ninja API beside the DRF one, at ``/ninja/``: the same charges, API-key auth.

``X-API-Key`` carries a DRF token (``manage.py ensure_demo_user`` prints the
demo one); the principal is the token's user, so a caller's key space is the
same here as in the DRF API. Swagger UI at ``/ninja/docs`` is served from the
static files (``"ninja"`` is in ``INSTALLED_APPS``), not from a CDN.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.http import HttpRequest
from ninja import NinjaAPI, Schema, Status
from ninja.security import APIKeyHeader
from rest_framework.authtoken.models import Token

from idempotency_django.conformance import conformance_hooks
from idempotency_django.ninja import idempotent
from sample_project.payments.models import Charge


class ApiKey(APIKeyHeader):
    param_name = "X-API-Key"

    def authenticate(self, request: HttpRequest, key: str | None) -> AbstractBaseUser | None:
        token = Token.objects.select_related("user").filter(key=key or "").first()
        return token.user if token is not None else None


class ChargeIn(Schema):
    amount: int
    currency: str = "eur"
    description: str = ""


class ChargeOut(Schema):
    id: int
    amount: int
    currency: str
    description: str


api = NinjaAPI(title="Payments (Ninja)", urls_namespace="ninja", auth=ApiKey())


@api.post("/charges", response={201: ChargeOut})
@idempotent
@conformance_hooks
def create_charge(request: HttpRequest, payload: ChargeIn) -> Status[Any]:
    """Take a charge; retry it with the same `Idempotency-Key` as often as you like."""
    provider_key = request.idempotency.derive("provider")  # type: ignore[attr-defined]
    user = request.auth  # type: ignore[attr-defined]
    charge = Charge.objects.create(user=user, provider_key=provider_key, **payload.dict())
    return Status(201, charge)


@api.post("/async/charges", response={201: ChargeOut})
@idempotent
@conformance_hooks
async def create_charge_async(request: HttpRequest, payload: ChargeIn) -> Status[Any]:
    """The same, as an ``async def`` operation."""
    provider_key = request.idempotency.derive("provider")  # type: ignore[attr-defined]
    user = request.auth  # type: ignore[attr-defined]
    charge = await Charge.objects.acreate(user=user, provider_key=provider_key, **payload.dict())
    return Status(201, charge)


@api.get("/charges", response=list[ChargeOut])
def list_charges(request: HttpRequest) -> list[Charge]:
    return list(Charge.objects.filter(user=request.auth))  # type: ignore[attr-defined]
