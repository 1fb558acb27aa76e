"""The sample project's receipt (through the outbox) and its signed webhook."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery, current_app
from django.core import mail
from django.test import Client

from idempotency_django.outbox.models import OutboxMessage
from sample_project.payments.models import Charge
from sample_project.payments.webhooks import sign
from tests.helpers import new_key

pytestmark = [pytest.mark.faces, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def sample(settings: Any) -> Iterator[None]:
    settings.ROOT_URLCONF = "sample_project.urls"
    settings.WEBHOOK_SECRET = "test-secret"
    # The sample without a broker: CELERY_TASK_ALWAYS_EAGER, as under `make run`.
    eager = Celery("sample_eager", set_as_current=False)
    eager.conf.task_always_eager = True
    previous = current_app._get_current_object()  # type: ignore[attr-defined]
    eager.set_current()
    yield
    previous.set_current()


def charge(client: Client, key: str) -> Any:
    body = json.dumps({"amount": 1000})
    return client.post(
        "/charges/", body, content_type="application/json", headers={"Idempotency-Key": key}
    )


def test_the_charge_sends_one_receipt_through_the_outbox(sample: None, client: Client) -> None:
    key = new_key()
    assert charge(client, key).status_code == 201
    assert charge(client, key)["Idempotent-Replayed"] == "true"
    assert len(mail.outbox) == 1
    assert mail.outbox[0].subject.startswith("Your receipt for charge #")
    row = OutboxMessage.objects.get()
    assert row.task == "sample_project.payments.tasks.send_receipt"
    assert row.sent_at is not None


def webhook(client: Client, event: dict[str, Any], signature: str | None = None) -> Any:
    body = json.dumps(event).encode()
    return client.post(
        "/webhooks/provider/",
        body,
        content_type="application/json",
        headers={"X-Signature": signature or sign(body)},
    )


def test_the_webhook_processes_each_event_once(sample: None, client: Client) -> None:
    target = Charge.objects.create(amount=100)
    event = {"id": "evt_1", "type": "charge.refunded", "data": {"charge": target.pk}}
    first = webhook(client, event)
    again = webhook(client, event)
    assert (first.status_code, again.status_code) == (200, 200)
    assert again["Idempotent-Replayed"] == "true"
    assert again.content == first.content == b'{"received": "evt_1"}'
    target.refresh_from_db()
    assert target.description == "[refunded by evt_1]"


def test_the_webhook_refuses_a_bad_signature_before_any_claim(sample: None, client: Client) -> None:
    event = {"id": "evt_2", "type": "charge.refunded", "data": {"charge": 1}}
    assert webhook(client, event, signature="sha256=forged").status_code == 401
    assert webhook(client, event).status_code == 200  # the forgery never took the key
    assert webhook(client, {"type": "no id"}).status_code == 400


def test_the_receipt_runs_once_as_a_django_task_too(
    sample: None, client: Client, settings: Any
) -> None:
    settings.SAMPLE_TASKS = "django"
    key = new_key()
    assert charge(client, key).status_code == 201
    assert charge(client, key)["Idempotent-Replayed"] == "true"
    assert len(mail.outbox) == 1
    row = OutboxMessage.objects.get()
    assert row.task == "sample_project.payments.receipts.receipt"
    assert row.sent_at is not None
