"""Django Ninja under ``ATOMIC_REQUESTS``: the claim's transaction is bounded by
``IDEMPOTENCY_IDLE_TIMEOUT``, as the plain decorator's is.

Django wraps a Ninja operation whole in the request's ``atomic()``, so the claim
joins a transaction the store leaves unbounded (a caller's is not its to cut
short): a holder frozen behind a partition would keep its key until TCP noticed.
The bound is PostgreSQL's (``idle_in_transaction_session_timeout``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.http import HttpRequest
from django.test import Client, override_settings
from django.urls import path
from ninja import NinjaAPI

from idempotency_django.ninja import idempotent
from tests.helpers import new_key

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.requires_postgres,
    pytest.mark.urls(__name__),
]
api = NinjaAPI(urls_namespace="ninja-idle-bound")


@api.post("/probe")
@idempotent(protocol="lease")
def probe(request: HttpRequest) -> dict[str, Any]:
    with connection.cursor() as cursor:
        cursor.execute("SHOW idle_in_transaction_session_timeout")
        timeout = cursor.fetchone()[0]
    return {"timeout": timeout, "in_atomic_block": connection.in_atomic_block}


urlpatterns = [path("api/", api.urls)]


@pytest.fixture
def atomic_requests() -> Iterator[None]:
    connection.settings_dict["ATOMIC_REQUESTS"] = True
    try:
        yield
    finally:
        connection.settings_dict["ATOMIC_REQUESTS"] = False


@override_settings(IDEMPOTENCY_IDLE_TIMEOUT=7)
def test_a_ninja_claim_in_the_request_transaction_is_ended_by_postgres_when_left_idle(
    atomic_requests: None,
) -> None:
    response = Client().post(
        "/api/probe", "{}", content_type="application/json", headers={"Idempotency-Key": new_key()}
    )
    assert response.status_code == 200
    assert json.loads(response.content) == {"timeout": "7s", "in_atomic_block": True}
