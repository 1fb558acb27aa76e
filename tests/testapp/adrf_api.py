"""adrf (async DRF) views the tests protect with ``IdempotentMixin``: ``async def`` handlers.

Every execution that commits leaves one ``Charge`` whose reference is the key.
"""

from __future__ import annotations

import asyncio
from typing import Any

from adrf import generics as agenerics
from adrf import viewsets as aviewsets
from adrf.views import APIView as AsyncAPIView
from asgiref.sync import sync_to_async
from django.urls import path
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import SimpleRouter

from idempotency_django.rest_framework import IdempotentMixin
from tests.testapp.api import ChargeSerializer
from tests.testapp.models import Charge
from tests.testapp.ninja_api import held


def _caller(request: Request) -> str:
    return str(request.user.pk) if request.user.is_authenticated else ""


async def _create(request: Request) -> Response:
    data: Any = request.data
    if data.get("sleep"):
        await asyncio.sleep(float(data["sleep"]))
    charge = await Charge.objects.acreate(
        reference=request.idempotency.key or "",  # type: ignore[attr-defined]
        amount=int(data.get("amount", 0)),
    )
    if data.get("fail"):
        raise RuntimeError("boom")
    body = {"id": charge.pk, "reference": charge.reference, "caller": _caller(request)}
    answer = int(data.get("status", status.HTTP_201_CREATED))
    return Response(body, status=answer, headers={"Location": f"/charges/{charge.pk}"})


class AsyncChargeView(IdempotentMixin, AsyncAPIView):  # type: ignore[misc]
    async def post(self, request: Request) -> Response:
        return await _create(request)


class SyncChargeView(IdempotentMixin, AsyncAPIView):  # type: ignore[misc]
    """An adrf view with a plain ``def`` handler: adrf runs it synchronously."""

    def post(self, request: Request) -> Response:
        charge = Charge.objects.create(
            reference=request.idempotency.key or "",  # type: ignore[attr-defined]
            amount=int(request.data.get("amount", 0)),  # type: ignore[union-attr]
        )
        return Response({"id": charge.pk, "caller": _caller(request)}, status=201)


class AsyncCreateView(IdempotentMixin, agenerics.CreateAPIView):  # type: ignore[misc]
    queryset = Charge.objects.all()
    serializer_class = ChargeSerializer

    async def perform_acreate(self, serializer: Any) -> None:
        key = self.request.idempotency.key  # type: ignore[attr-defined]
        await sync_to_async(serializer.save)(reference=key)


class HeldView(IdempotentMixin, AsyncAPIView):  # type: ignore[misc]
    """Waits, on the event loop, for the test's go (tests/test_async_loop.py)."""

    idempotency_wait = 20

    async def post(self, request: Request) -> Response:
        key = request.idempotency.key  # type: ignore[attr-defined]
        held[f"{key}:entered"].set()
        await held[f"{key}:release"].wait()
        return await _create(request)


class AsyncChargeViewSet(IdempotentMixin, aviewsets.ViewSet):  # type: ignore[misc]
    async def create(self, request: Request) -> Response:
        return await _create(request)

    async def list(self, request: Request) -> Response:
        return Response([])


router = SimpleRouter()
router.register("viewset", AsyncChargeViewSet, basename="adrf-charges")

urlpatterns: list[Any] = [
    path("apiview/", AsyncChargeView.as_view()),
    path("sync-apiview/", SyncChargeView.as_view()),
    path("generic/", AsyncCreateView.as_view()),
    path("held/", HeldView.as_view()),
    *router.urls,
]
