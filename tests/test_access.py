"""``idempotency_of(request)``: the context of plain and DRF views, typed (see test_typing.py)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse
from django.test import RequestFactory
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.test import APIRequestFactory
from rest_framework.views import APIView

from idempotency_django import IdempotencyContext, idempotency_of, idempotent
from idempotency_django.rest_framework import IdempotentMixin

pytestmark = pytest.mark.django_db
seen: list[IdempotencyContext] = []


@idempotent
def plain(request: HttpRequest) -> HttpResponse:
    seen.append(idempotency_of(request))
    return HttpResponse(status=201)


class Drf(IdempotentMixin, APIView):
    authentication_classes = ()
    permission_classes = ()

    def post(self, request: Request) -> Response:
        seen.append(idempotency_of(request))
        assert idempotency_of(self.request) is idempotency_of(request._request)
        return Response(status=201)


@pytest.fixture(autouse=True)
def _clear() -> None:
    seen.clear()


def test_a_plain_view_gets_its_context() -> None:
    request = RequestFactory().post("/", HTTP_IDEMPOTENCY_KEY="k-plain")
    assert plain(request).status_code == 201
    [context] = seen
    assert context.key == "k-plain"
    assert context is request.idempotency  # type: ignore[attr-defined]


def test_a_drf_view_gets_its_context() -> None:
    request = APIRequestFactory().post("/", {}, format="json", HTTP_IDEMPOTENCY_KEY="k-drf")
    assert Drf.as_view()(request).status_code == 201
    [context] = seen
    assert context.key == "k-drf"
    assert context.replayed is False


def test_an_unprotected_request_is_refused_loudly() -> None:
    with pytest.raises(ImproperlyConfigured, match="no idempotency context"):
        idempotency_of(RequestFactory().post("/"))
