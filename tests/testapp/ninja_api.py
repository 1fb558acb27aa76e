"""Django Ninja operations the tests protect with ``idempotency_django.ninja.idempotent``.

Every execution that commits leaves one ``Charge`` whose reference is the key
(``tests.helpers.charges(key)``). The JSON body steers what an operation does.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse
from ninja import NinjaAPI, Router, Schema, Status
from ninja.errors import HttpError
from ninja.security import APIKeyHeader, HttpBearer

from idempotency_django.ninja import idempotent
from tests.testapp.models import Charge

API_KEYS = {"key-alice", "key-bob"}
TOKENS = {"token-carol", "token-dave"}


class ApiKey(APIKeyHeader):
    param_name = "X-API-Key"

    def authenticate(self, request: HttpRequest, key: str | None) -> str | None:
        return key if key in API_KEYS else None


class Bearer(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> str | None:
        return token if token in TOKENS else None


class ChargeIn(Schema):
    amount: int
    sleep: float = 0
    status: int = 201
    fail: bool = False


class ChargeOut(Schema):
    id: int
    reference: str
    amount: int
    caller: str


def _charge(request: HttpRequest, payload: ChargeIn) -> Charge:
    if payload.sleep:
        time.sleep(payload.sleep)
    charge = Charge.objects.create(
        reference=request.idempotency.key or "",  # type: ignore[attr-defined]
        amount=payload.amount,
    )
    if payload.fail:
        raise HttpError(503, "The payment provider is down.")
    return charge


def _out(request: HttpRequest, charge: Charge) -> dict[str, Any]:
    caller = getattr(request, "auth", None)
    return {
        "id": charge.pk,
        "reference": charge.reference,
        "amount": charge.amount,
        "caller": str(caller),
    }


api = NinjaAPI(urls_namespace="tests-ninja", auth=ApiKey())


@api.post("/charges", response={201: ChargeOut, 200: ChargeOut, 402: dict, 503: dict})
@idempotent
def create_charge(request: HttpRequest, payload: ChargeIn) -> Any:
    charge = _charge(request, payload)
    return Status(payload.status, _out(request, charge))


@api.post("/async/charges", response={201: ChargeOut, 200: ChargeOut, 402: dict, 503: dict})
@idempotent
async def create_charge_async(request: HttpRequest, payload: ChargeIn) -> Any:
    await asyncio.sleep(0)
    charge = await sync_to_async(_charge)(request, payload)
    return Status(payload.status, _out(request, charge))


@api.post("/bearer/charges", auth=Bearer(), response={201: ChargeOut})
@idempotent
def create_charge_bearer(request: HttpRequest, payload: ChargeIn) -> Any:
    return Status(201, _out(request, _charge(request, payload)))


@api.post("/async/bearer/charges", auth=Bearer(), response={201: ChargeOut})
@idempotent
async def create_charge_bearer_async(request: HttpRequest, payload: ChargeIn) -> Any:
    charge = await sync_to_async(_charge)(request, payload)
    return Status(201, _out(request, charge))


@api.post("/returns/dict")
@idempotent
def returns_dict(request: HttpRequest, payload: ChargeIn) -> dict[str, Any]:
    return _out(request, _charge(request, payload))


@api.post("/returns/schema", response=ChargeOut)
@idempotent
def returns_schema(request: HttpRequest, payload: ChargeIn) -> ChargeOut:
    return ChargeOut(**_out(request, _charge(request, payload)))


@api.post("/returns/tuple", response={201: ChargeOut})
@idempotent
def returns_tuple(request: HttpRequest, payload: ChargeIn) -> Any:
    # Deprecated by Ninja 1.5 (Status is the new way), still supported.
    return 201, _out(request, _charge(request, payload))


@api.post("/returns/http-response")
@idempotent
def returns_http_response(request: HttpRequest, payload: ChargeIn) -> HttpResponse:
    response = JsonResponse(_out(request, _charge(request, payload)), status=201)
    response["Location"] = f"/charges/{request.idempotency.key}"  # type: ignore[attr-defined]
    return response


@api.post("/returns/headers", response={201: ChargeOut})
@idempotent
def sets_headers(request: HttpRequest, payload: ChargeIn, response: HttpResponse) -> Any:
    charge = _charge(request, payload)
    response["Location"] = f"/charges/{charge.pk}"
    response.set_cookie("receipt", str(charge.pk))
    return Status(201, _out(request, charge))


@api.post("/open/charges", auth=None, response={201: ChargeOut})
@idempotent(tenant=lambda request: request.headers.get("X-Account", ""))
def open_charge(request: HttpRequest, payload: ChargeIn) -> Any:
    return Status(201, _out(request, _charge(request, payload)))


@api.post("/anonymous/charges", auth=None, response={201: ChargeOut})
@idempotent
def anonymous_charge(request: HttpRequest, payload: ChargeIn) -> Any:
    return Status(201, _out(request, _charge(request, payload)))


@api.get("/async/ping", auth=None)
async def ping(request: HttpRequest) -> dict[str, str]:
    return {"pong": "yes"}


# The event-loop test: the protected operation waits, on the loop, for the test's go.
held: dict[str, asyncio.Event] = {}


@api.post("/async/held", auth=None, response={201: ChargeOut})
@idempotent(wait=20)
async def held_charge(request: HttpRequest, payload: ChargeIn) -> Any:
    key = request.idempotency.key  # type: ignore[attr-defined]
    entered, release = held[f"{key}:entered"], held[f"{key}:release"]
    entered.set()
    await release.wait()
    charge = await sync_to_async(_charge)(request, payload)
    return Status(201, _out(request, charge))


# The router-wide form: every unsafe operation of the router is protected.
wide = Router()
wide.add_decorator(idempotent(ttl=600), mode="view")


@wide.post("/charges", response={201: ChargeOut})
def wide_charge(request: HttpRequest, payload: ChargeIn) -> Any:
    return Status(201, _out(request, _charge(request, payload)))


@wide.post("/async/charges", response={201: ChargeOut})
async def wide_charge_async(request: HttpRequest, payload: ChargeIn) -> Any:
    charge = await sync_to_async(_charge)(request, payload)
    return Status(201, _out(request, charge))


@wide.get("/charges")
def wide_list(request: HttpRequest) -> list[int]:
    return []


api.add_router("/wide", wide)
