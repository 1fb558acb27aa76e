"""The demo's edges from issue 24: a favicon, counts per intent, long keys that don't wrap."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from idempotency_django.testing import new_key, send
from sample_project.payments import checkout
from tests.factories import IdempotencyEntryFactory

pytestmark = [pytest.mark.faces, pytest.mark.django_db, pytest.mark.urls("sample_project.urls")]
PAY = "/checkout/pay/"


@pytest.fixture(autouse=True)
def static_url(settings: Any) -> None:
    settings.STATIC_URL = "/static/"


def test_favicon_ico_points_at_the_icon(client: Client) -> None:
    answer = client.get("/favicon.ico")
    assert answer.status_code == 302
    assert answer["Location"] == "/static/payments/favicon.svg"


@pytest.mark.parametrize("page", ["/", "/checkout/", "/checkout/form/"])
def test_every_page_names_its_icon(client: Client, page: str) -> None:
    assert 'rel="icon" href="/static/payments/favicon.svg"' in client.get(page).content.decode()


def test_the_order_status_counts_the_intents_charges_apart(client: Client) -> None:
    order, first, second = checkout.new_order(), new_key(), new_key()
    body = {"order": order, "amount": 1999}
    for key in (first, first, second):  # a retry of the first intent, then a new intent
        assert send(client, PAY, body, key=key).status_code == 201
    status = client.get(f"/checkout/orders/{order}/", {"key": first}).json()
    assert (status["charges"], status["intent_charges"]) == (2, 1)
    fresh = client.get(f"/checkout/orders/{order}/", {"key": new_key()}).json()
    assert fresh["intent_charges"] == 0
    assert "intent_charges" not in client.get(f"/checkout/orders/{order}/").json()


def test_the_index_cuts_long_keys_without_wrapping(client: Client) -> None:
    long_key = "k" * 200
    IdempotencyEntryFactory.create(key=long_key)
    page = client.get("/").content.decode()
    assert f'<code class="key" title="{long_key}">' in page
    assert "white-space:nowrap" in page


def test_the_admin_keeps_the_status_beside_a_cut_key(admin_client: Client) -> None:
    long_key = "order-" + "x" * 100
    IdempotencyEntryFactory.create(key=long_key)
    page = admin_client.get("/admin/idempotency_django/idempotencyentry/").content.decode()
    assert f'<span title="{long_key}">{long_key[:36]}…</span>' in page
    headers = [h for h in ("column-readable_key", "column-status", "column-tenant") if h in page]
    assert headers == ["column-readable_key", "column-status", "column-tenant"]
    assert page.index("column-status") < page.index("column-tenant")
