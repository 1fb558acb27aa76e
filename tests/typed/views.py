"""Checked by ``tests/test_typing.py`` with strict mypy and the stubs: no ``type: ignore``."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from idempotency_django import IdempotencyContext, IdempotentRequest, idempotency_of, idempotent
from idempotency_django.rest_framework import IdempotentMixin


@idempotent
def charge(request: IdempotentRequest) -> HttpResponse:
    context: IdempotencyContext = request.idempotency
    return HttpResponse(context.derive("provider"), status=201)


@idempotent(ttl=60)
def refund(request: HttpRequest) -> HttpResponse:
    key: str | None = idempotency_of(request).key
    return HttpResponse(key or "", status=201)


class ChargeView(IdempotentMixin, APIView):
    def post(self, request: Request) -> Response:
        context = idempotency_of(request)
        replayed: bool = idempotency_of(self.request).replayed
        return Response({"key": context.derive("provider"), "replayed": replayed}, status=201)
