"""A tenant resolver meeting a database error: the store's answer (503 or 409), the view not run."""

from __future__ import annotations

import pytest
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse
from django.test import RequestFactory

from idempotency_django import idempotent
from tests.helpers import new_key, problem


@pytest.mark.parametrize("error", [OperationalError, InterfaceError])
def test_a_resolver_loading_the_user_from_an_unreachable_database_answers_503(
    error: type[Exception],
) -> None:
    ran: list[bool] = []

    def resolver(request: HttpRequest) -> str:
        raise error("server closed the connection unexpectedly")

    def view(request: HttpRequest) -> HttpResponse:
        ran.append(True)
        return HttpResponse(status=201)

    request = RequestFactory().post("/", HTTP_IDEMPOTENCY_KEY=new_key())
    response = idempotent(tenant=resolver)(view)(request)
    assert response.status_code == 503
    assert problem(response)["status"] == 503
    assert ran == []
