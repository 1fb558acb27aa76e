"""The sample project's Ninja API (``/ninja/``): API-key auth, replay, its offline docs page."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from idempotency_django.testing import assert_replays, new_key, send
from sample_project.payments.models import Charge

pytestmark = [pytest.mark.faces, pytest.mark.django_db, pytest.mark.urls("sample_project.urls")]


@pytest.fixture(autouse=True)
def static_url(settings: Any) -> None:
    settings.STATIC_URL = "/static/"


@pytest.fixture
def api_key() -> str:
    from sample_project.payments.management.commands.ensure_demo_user import demo_token

    return demo_token()


@pytest.mark.parametrize("path", ["/ninja/charges", "/ninja/async/charges"])
def test_a_charge_is_taken_once_and_replayed(api_key: str, path: str) -> None:
    client = Client(HTTP_X_API_KEY=api_key)
    replay = assert_replays(client, path, {"amount": 500}, executions=Charge.objects.count)
    assert replay.first.status_code == 201


def test_without_an_api_key_it_is_401_and_nothing_is_claimed() -> None:
    response = send(Client(), "/ninja/charges", {"amount": 500}, key=new_key())
    assert response.status_code == 401
    assert Charge.objects.count() == 0


def test_the_docs_page_works_offline() -> None:
    page = Client().get("/ninja/docs")
    assert page.status_code == 200
    assert b"/static/ninja/swagger-ui-bundle.js" in page.content
    assert b"cdn" not in page.content.lower()
    schema = Client().get("/ninja/openapi.json").json()
    header = schema["paths"]["/ninja/charges"]["post"]["parameters"][0]
    assert (header["in"], header["name"]) == ("header", "Idempotency-Key")
