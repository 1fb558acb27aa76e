"""An ``idempotent_call`` inside a protected view: its refusal is the view's failure.

The client's own key was fine; answering 422 ``key-reused`` (or storing that answer,
as the DRF handler's exception handling would) would blame the wrong key.
"""

from __future__ import annotations

import json

import pytest
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.test import Client
from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from idempotency_django import idempotent, idempotent_call
from idempotency_django.exceptions import NestedRefusal
from idempotency_django.models import IdempotencyEntry
from idempotency_django.rest_framework import IdempotentMixin
from tests.helpers import new_key, post
from tests.testapp.models import Charge

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls(__name__)]


def ship(amount: int) -> dict[str, int]:
    """The view's own idempotent step: one shipment per order, whatever the client key."""
    Charge.objects.create(reference="nested", amount=amount)
    with idempotent_call("order-1", scope="shipping", arguments={"amount": amount}) as call:
        if not call.replayed:
            call.result = {"shipped": amount}
    return dict(call.result)


@csrf_exempt
@idempotent
def shipping_view(request: HttpRequest) -> HttpResponse:
    return JsonResponse(ship(json.loads(request.body)["amount"]), status=201)


@csrf_exempt
@idempotent(required=False)
def optional_view(request: HttpRequest) -> HttpResponse:
    return JsonResponse(ship(json.loads(request.body)["amount"]), status=201)


class ShippingAPI(IdempotentMixin, APIView):
    permission_classes = (AllowAny,)
    authentication_classes = ()

    def post(self, request: Request) -> Response:
        return Response(ship(int(json.loads(request.body)["amount"])), status=201)


urlpatterns = [
    path("ship/", shipping_view),
    path("optional/ship/", optional_view),
    path("api/ship/", ShippingAPI.as_view()),
]


@pytest.mark.parametrize("url", ["/ship/", "/api/ship/"])
def test_a_refused_inner_call_fails_the_view_and_stores_nothing(url: str) -> None:
    client = Client(raise_request_exception=False)
    assert post(client, url, new_key(), {"amount": 1}).status_code == 201
    key = new_key()
    answer = post(client, url, key, {"amount": 2})  # the inner call's key, other arguments
    assert answer.status_code == 500, answer.content[:300]
    assert not IdempotencyEntry.objects.filter(key=key).exists()
    assert Charge.objects.filter(reference="nested", amount=2).count() == 0


def test_the_view_error_names_the_inner_refusal() -> None:
    client = Client()
    post(client, "/ship/", new_key(), {"amount": 1})
    with pytest.raises(NestedRefusal, match="key-reused"):
        post(client, "/ship/", new_key(), {"amount": 2})


def test_without_a_client_key_the_refusal_still_fails_the_view() -> None:
    client = Client(raise_request_exception=False)
    assert post(client, "/optional/ship/", None, {"amount": 1}).status_code == 201
    assert post(client, "/optional/ship/", None, {"amount": 2}).status_code == 500
