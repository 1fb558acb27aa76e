"""Adversarial review of 0.3's seams (the merged branches): each test a defect found, or
an attack that held and must keep holding."""

from __future__ import annotations

import pytest
from django.test import Client, override_settings

from idempotency_django import secret
from idempotency_django.models import IdempotencySecret
from tests.helpers import new_key, post


@pytest.mark.requires_postgres
@pytest.mark.django_db(transaction=True)
@override_settings(IDEMPOTENCY_PROTOCOL="lock", IDEMPOTENCY_SECRET=None)
def test_a_secret_first_read_in_a_rolled_back_claim_is_persisted() -> None:
    """The first claim of a process can be the one to persist the server secret, inside
    the view's transaction. That transaction may roll back (a 503 here): the secret the
    process went on using (cached, its lock ids and derived keys) must be the committed
    one, or a server started after a SECRET_KEY rotation persists another one and a retry
    gets another derived key (a second charge at the payment provider)."""
    IdempotencySecret.objects.all().delete()
    secret._cache.clear()
    response = post(Client(), "/charges/", new_key(), {"status": 503})
    assert response.status_code == 503
    used = secret._cache["default"]
    assert IdempotencySecret.objects.filter(pk=1).exists()
    # Another server, its SECRET_KEY rotated and the fallback dropped, reads the row.
    with override_settings(SECRET_KEY="rotated-" + "z" * 50, SECRET_KEY_FALLBACKS=[]):
        assert secret.server_secret("default") == used
