"""``@api_view`` above ``@idempotent`` under ``ATOMIC_REQUESTS``: the idle timeout still bounds
the claim."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.test import Client, override_settings
from django.urls import path
from rest_framework.decorators import api_view, authentication_classes, permission_classes
from rest_framework.response import Response

from idempotency_django import idempotent
from tests.helpers import new_key, post

pytestmark = [pytest.mark.requires_postgres, pytest.mark.django_db(transaction=True)]


@api_view(["POST"])
@authentication_classes([])
@permission_classes([])
@idempotent
def drf_function(request: Any) -> Response:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('idle_in_transaction_session_timeout')")
        (idle,) = cursor.fetchone()
    return Response({"idle": idle, "atomic": connection.in_atomic_block}, status=201)


urlpatterns = [path("drf-function/", drf_function)]


@pytest.fixture
def atomic_requests() -> Iterator[None]:
    connection.settings_dict["ATOMIC_REQUESTS"] = True
    yield
    connection.settings_dict["ATOMIC_REQUESTS"] = False


@pytest.mark.usefixtures("atomic_requests")
@override_settings(ROOT_URLCONF=__name__, IDEMPOTENCY_IDLE_TIMEOUT=7)
@pytest.mark.parametrize("protocol", ["lock", "lease"])
def test_api_view_above_idempotent_keeps_the_idle_timeout(protocol: str) -> None:
    """0.2.0: DRF's as_view() drops ``_non_atomic_requests``, Django wraps the request in
    atomic(), and the claim inside it was left unbounded: an idle holder kept its key."""
    with override_settings(IDEMPOTENCY_PROTOCOL=protocol):
        response = post(Client(), "/drf-function/", new_key())
    assert response.status_code == 201, response.content
    assert response.json() == {"idle": "7s", "atomic": True}
