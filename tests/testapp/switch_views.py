"""Views protected by nothing but ``IdempotencyMiddleware`` (``tests/test_middleware.py``,
``tests/conformance/test_switch_and_forms.py``), and a few that protect themselves.

Every one creates one ``Charge`` and answers ``{"id": ..., "amount": ...}`` with 201;
each carries the conformance test hooks (off unless ``IDEMPOTENCY_CONFORMANCE_HOOKS``).
The DRF views authenticate with a token, the Ninja API with an API key.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any, TypeVar

from adrf.views import APIView as AsyncAPIView
from asgiref.sync import sync_to_async
from django import forms
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import URLPattern, URLResolver, include, path
from django.views import View
from django.views.generic import FormView
from ninja import NinjaAPI, Schema, Status
from ninja.security import APIKeyHeader
from rest_framework.authentication import TokenAuthentication
from rest_framework.decorators import (
    api_view,
    authentication_classes,
    permission_classes,
)
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import SimpleRouter
from rest_framework.views import APIView
from rest_framework.viewsets import ViewSet

from idempotency_django import idempotency_exempt
from idempotency_django.conformance import conformance_hooks
from idempotency_django.ninja import idempotent as ninja_idempotent
from idempotency_django.rest_framework import IdempotentMixin
from idempotency_django.views import IdempotentFormMixin
from tests.testapp.models import Charge

API_KEYS = {"switch-alice", "switch-bob"}


def _created(charge: Charge) -> JsonResponse:
    return JsonResponse({"id": charge.pk, "amount": charge.amount}, status=201)


def _amount(body: bytes) -> int | None:
    try:
        amount = json.loads(body)["amount"]
    except (ValueError, KeyError, TypeError):
        return None
    return amount if isinstance(amount, int) else None


# --- Django views ----------------------------------------------------------------------------


@conformance_hooks
def charge(request: HttpRequest) -> HttpResponse:
    """A plain function view: no decorator of ours."""
    amount = _amount(request.body)
    if amount is None:
        return JsonResponse({"error": "send an amount"}, status=400)
    return _created(Charge.objects.create(reference="switch-function", amount=amount))


@conformance_hooks
async def async_charge(request: HttpRequest) -> HttpResponse:
    """A plain ``async`` function view."""
    amount = _amount(request.body)
    if amount is None:
        return JsonResponse({"error": "send an amount"}, status=400)
    created = await Charge.objects.acreate(reference="switch-async", amount=amount)
    return _created(created)


@idempotency_exempt
class ExemptChargeView(View):
    """A Django class-based view out of the middleware's protection, marked on its class."""

    def post(self, request: HttpRequest) -> HttpResponse:
        return charge(request)


class ChargeForm(forms.Form):
    amount = forms.IntegerField()
    currency = forms.CharField(required=False)


class _FormKeyInHeaders:
    """The request as the conformance hooks read it: they find the key in the header; a
    form post carries it in its ``idempotency_key`` field."""

    def __init__(self, request: HttpRequest) -> None:
        self.method = request.method
        self.headers = {**request.headers, "Idempotency-Key": request.POST.get("idempotency_key")}


def _form_valid(view: FormView[ChargeForm], form: ChargeForm) -> HttpResponse:
    @conformance_hooks
    def create(request: Any) -> HttpResponse:
        amount = form.cleaned_data["amount"]
        return _created(Charge.objects.create(reference="switch-form", amount=amount))

    return create(_FormKeyInHeaders(view.request))


class _CreatingFormView(FormView[ChargeForm]):
    # IdempotentFormMixin.form_valid protects this one (its parent's): the creation.
    def form_valid(self, form: ChargeForm) -> HttpResponse:
        return _form_valid(self, form)


class FormCharge(IdempotentFormMixin, _CreatingFormView):
    """A form view: ``form_valid`` runs once per form key (IdempotentFormMixin)."""

    form_class = ChargeForm

    def form_invalid(self, form: ChargeForm) -> HttpResponse:
        return JsonResponse({"errors": form.errors}, status=400)


# --- Django REST framework, token authentication -----------------------------------------------


def _drf_create(request: Request) -> Response:
    amount = request.data.get("amount") if isinstance(request.data, dict) else None
    if not isinstance(amount, int):
        return Response({"error": "send an amount"}, status=400)
    created = Charge.objects.create(reference="switch-drf", amount=amount)
    return Response({"id": created.pk, "amount": amount}, status=201)


class DrfCharge(APIView):
    """No IdempotentMixin: only the middleware protects it, after DRF's authentication."""

    authentication_classes = (TokenAuthentication,)
    permission_classes = (IsAuthenticated,)

    @conformance_hooks
    def post(self, request: Request) -> Response:
        return _drf_create(request)


class ChargeViewSet(ViewSet):
    authentication_classes = (TokenAuthentication,)
    permission_classes = (IsAuthenticated,)

    @conformance_hooks
    def create(self, request: Request) -> Response:
        return _drf_create(request)


@api_view(["POST"])
@authentication_classes([TokenAuthentication])
@permission_classes([IsAuthenticated])
@conformance_hooks
def drf_function(request: Request) -> Response:
    return _drf_create(request)


class AdrfCharge(AsyncAPIView):  # type: ignore[misc]
    """adrf: an ``async def`` handler, only the middleware protects it."""

    authentication_classes = (TokenAuthentication,)
    permission_classes = (IsAuthenticated,)

    @conformance_hooks
    async def post(self, request: Request) -> Response:
        amount = request.data.get("amount") if isinstance(request.data, dict) else None
        if not isinstance(amount, int):
            return Response({"error": "send an amount"}, status=400)
        created = await Charge.objects.acreate(reference="switch-adrf", amount=amount)
        return Response({"id": created.pk, "amount": amount}, status=201)


class SelfProtectedDrfCharge(IdempotentMixin, DrfCharge):
    """Protects itself: the middleware leaves it to the mixin (one claim, not two)."""


@idempotency_exempt
class ExemptViewSet(ChargeViewSet):
    """Out of the middleware's protection, a router's viewset marked on its class."""


router = SimpleRouter()
router.register("viewset", ChargeViewSet, basename="switch-viewset")
router.register("exempt-viewset", ExemptViewSet, basename="switch-exempt-viewset")


# --- Django Ninja, API key authentication ------------------------------------------------------


class ApiKey(APIKeyHeader):
    param_name = "X-API-Key"

    def authenticate(self, request: HttpRequest, key: str | None) -> str | None:
        return key if key in API_KEYS else None


class ChargeIn(Schema):
    amount: int
    currency: str = "eur"


class ChargeOut(Schema):
    id: int
    amount: int


api = NinjaAPI(urls_namespace="switch-ninja", auth=ApiKey())
Operation = TypeVar("Operation", bound=Callable[..., Any])


def ninja_hooks(function: Operation) -> Operation:
    """``conformance_hooks`` for an operation: Ninja reads the string annotations
    (``from __future__ import annotations``) in the wrapper's globals, not this module's."""
    hooked = conformance_hooks(function)
    hooked.__signature__ = inspect.signature(function, eval_str=True)  # type: ignore[attr-defined]
    return hooked


@api.post("/charges", response={201: ChargeOut})
@ninja_hooks
def ninja_charge(request: HttpRequest, payload: ChargeIn) -> Status[Charge]:
    return Status(201, Charge.objects.create(reference="switch-ninja", amount=payload.amount))


@api.post("/async/charges", response={201: ChargeOut})
@ninja_hooks
async def ninja_charge_async(request: HttpRequest, payload: ChargeIn) -> Status[Charge]:
    create = sync_to_async(Charge.objects.create)
    return Status(201, await create(reference="switch-ninja-async", amount=payload.amount))


@api.post("/protected/charges", response={201: ChargeOut})
@ninja_idempotent
def ninja_protected(request: HttpRequest, payload: ChargeIn) -> Status[Charge]:
    return Status(201, Charge.objects.create(reference="switch-ninja", amount=payload.amount))


@api.post("/exempt/charges", response={201: ChargeOut})
@idempotency_exempt
def ninja_exempt(request: HttpRequest, payload: ChargeIn) -> Status[Charge]:
    return Status(201, Charge.objects.create(reference="switch-ninja", amount=payload.amount))


urlpatterns: list[URLPattern | URLResolver] = [
    path("switch/function/", charge),
    path("switch/async/", async_charge),
    path("switch/exempt-class/", ExemptChargeView.as_view()),
    path("switch/form/", FormCharge.as_view()),
    path("switch/drf/", DrfCharge.as_view()),
    path("switch/drf-function/", drf_function),
    path("switch/adrf/", AdrfCharge.as_view()),
    path("switch/drf-protected/", SelfProtectedDrfCharge.as_view()),
    path("switch/", include(router.urls)),
    path("switch/ninja/", api.urls),
]
