"""The admin lists consumer failure counts: messages failing now and dead letters (kept
until the purge), read-only, by scope and message id."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.test import Client
from django.urls import path, reverse

from idempotency_django.consumers import GiveUp, consume

urlpatterns = [path("admin/", admin.site.urls)]
pytestmark = [pytest.mark.django_db, pytest.mark.urls(__name__)]


def poison() -> None:
    raise ValueError("no such account")


def test_the_admin_shows_consumer_dead_letters_and_failing_messages(admin_client: Client) -> None:
    consume("order-dead", poison, policy=GiveUp(max_attempts=1))
    consume("order-failing", poison, policy=GiveUp(max_attempts=5), scope="billing")
    changelist = reverse("admin:idempotency_consumers_consumerfailure_changelist")
    page = admin_client.get(changelist).content.decode()
    assert "order-dead" in page
    assert "order-failing" in page
    assert "billing" in page
    dead = admin_client.get(changelist, {"state": "dead"}).content.decode()
    assert "order-dead" in dead
    assert "order-failing" not in dead
    failing = admin_client.get(changelist, {"state": "failing"}).content.decode()
    assert "order-failing" in failing
    assert "order-dead" not in failing
    add = reverse("admin:idempotency_consumers_consumerfailure_add")
    assert admin_client.get(add).status_code == 403
