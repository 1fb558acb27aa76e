"""The sample project's checkout, through ``idempotency_django.testing`` as users would test."""

from __future__ import annotations

import re
import threading
from types import SimpleNamespace
from typing import Any

import pytest
from django.test import Client

from idempotency_django.testing import (
    assert_in_progress,
    assert_key_missing,
    assert_key_reused,
    assert_replayed,
    assert_replays,
    new_key,
    send,
)
from sample_project.payments import checkout
from sample_project.payments.models import Charge
from tests.conftest import close_connections_after

pytestmark = [
    pytest.mark.faces,
    pytest.mark.versions,
    pytest.mark.django_db,
    pytest.mark.urls("sample_project.urls"),
]

PAY = "/checkout/pay/"


@pytest.fixture(autouse=True)
def static_url(settings: Any) -> None:
    settings.STATIC_URL = "/static/"


@pytest.fixture
def order() -> str:
    return checkout.new_order()


def charges(order: str) -> int:
    return Charge.objects.filter(description=f"checkout {order}").count()


def payment(order: str, **fields: Any) -> dict[str, Any]:
    return {"order": order, "amount": 1999, **fields}


def test_paying_twice_with_one_key_charges_once(client: Client, order: str) -> None:
    replay = assert_replays(client, PAY, payment(order), executions=lambda: charges(order))
    assert replay.first.status_code == 201
    assert replay.first["Location"] == f"/checkout/receipts/{replay.first.json()['id']}/"


def test_a_new_key_is_a_new_charge(client: Client, order: str) -> None:
    for _ in range(2):
        assert send(client, PAY, payment(order), key=new_key()).status_code == 201
    assert charges(order) == 2


def test_an_injected_fault_rolls_back_and_the_retry_runs(client: Client, order: str) -> None:
    key = new_key()
    failed = send(client, PAY, payment(order, fail=1, fail_status=429), key=key)
    assert (failed.status_code, failed["Retry-After"]) == (429, "1")
    assert charges(order) == 0
    assert send(client, PAY, payment(order, fail=1, fail_status=429), key=key).status_code == 201
    assert charges(order) == 1


def test_a_bad_payment_is_a_final_answer_replayed(client: Client, order: str) -> None:
    key = new_key()
    first = send(client, PAY, payment(order, amount=0), key=key)
    assert first.status_code == 400
    assert_replayed(first, send(client, PAY, payment(order, amount=0), key=key))


@pytest.mark.parametrize(
    "fields",
    [{"order": "nope"}, {"fail_status": 404}, {"amount": "x"}],
)
def test_bad_fields_are_400(client: Client, order: str, fields: dict[str, Any]) -> None:
    assert send(client, PAY, {**payment(order), **fields}, key=new_key()).status_code == 400


def test_the_key_is_required_and_bound_to_the_payment(client: Client, order: str) -> None:
    assert_key_missing(send(client, PAY, payment(order), key=None))
    key = new_key()
    send(client, PAY, payment(order), key=key)
    assert_key_reused(send(client, PAY, payment(order, amount=1), key=key))
    assert charges(order) == 1


@pytest.mark.django_db(transaction=True)
def test_a_duplicate_in_flight_is_409(order: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """One runs (its payment provider is slow); a duplicate arriving meanwhile is told to retry.

    The duplicate is sent once the first is inside the view, and the first finishes only after
    the duplicate's answer: a barrier alone lets SQLite's single writer queue the duplicate's
    claim behind the first's transaction, and the duplicate then gets the (correct) replay.
    """
    key, body = new_key(), payment(order, delay=1)
    paying, answered = threading.Event(), threading.Event()

    def slow_provider(seconds: float) -> None:
        paying.set()
        answered.wait(timeout=30)

    monkeypatch.setattr(checkout, "time", SimpleNamespace(sleep=slow_provider))
    answers: dict[str, Any] = {}

    def pay(name: str) -> None:
        answers[name] = send(Client(), PAY, body, key=key)

    first = threading.Thread(target=close_connections_after(pay), args=("first",))
    first.start()
    try:
        assert paying.wait(timeout=30), "the first request never reached the view"
        close_connections_after(pay)("duplicate")
    finally:
        answered.set()
        first.join()
    assert_in_progress(answers["duplicate"])
    assert answers["first"].status_code == 201
    assert charges(order) == 1


def test_the_order_status(client: Client, order: str) -> None:
    send(client, PAY, payment(order), key=new_key())
    assert client.get(f"/checkout/orders/{order}/").json()["charges"] == 1
    assert client.get("/checkout/orders/NOT-AN-ORDER/").status_code == 404


def test_the_checkout_page_loads_the_client_module(client: Client) -> None:
    page = client.get("/checkout/").content.decode()
    assert '"idempotent-fetch": "/static/idempotency_django/idempotent-fetch.js"' in page
    assert re.search(r'data-order="[0-9a-f]{12}"', page)


def form_fields(client: Client) -> dict[str, str]:
    page = client.get("/checkout/form/").content.decode()
    fields = dict(re.findall(r'name="(\w+)" value="([^"]*)"', page))
    assert checkout.UUID7.fullmatch(fields["idempotency_key"])
    return {**fields, "amount": "1999"}


def test_the_form_submitted_twice_lands_on_one_receipt(client: Client) -> None:
    fields = form_fields(client)
    first = send(client, "/checkout/form/", fields, key=None, content_type=None)
    again = send(client, "/checkout/form/", fields, key=None, content_type=None)
    assert first.status_code == 302
    assert_replayed(first, again)
    receipt = client.get(first["Location"])
    assert receipt.context["count"] == charges(fields["order"]) == 1


def test_a_new_form_is_a_new_key(client: Client) -> None:
    assert form_fields(client)["idempotency_key"] != form_fields(client)["idempotency_key"]


def test_a_form_without_its_key_or_with_a_bad_amount(client: Client) -> None:
    fields = form_fields(client)
    without_key = {k: v for k, v in fields.items() if k != "idempotency_key"}
    assert_key_missing(send(client, "/checkout/form/", without_key, key=None, content_type=None))
    bad = send(client, "/checkout/form/", {**fields, "amount": "0"}, key=None, content_type=None)
    assert bad.status_code == 400
    assert b"Bad order or amount" in bad.content


def test_the_demo_token_authenticates(order: str) -> None:
    from sample_project.payments.management.commands.ensure_demo_user import demo_token

    token = demo_token()
    assert demo_token() == token  # made once
    client = Client(HTTP_AUTHORIZATION=f"Token {token}")
    replay = assert_replays(
        client, "/api/charges/", {"amount": 500}, executions=Charge.objects.count
    )
    assert replay.first.status_code == 201
