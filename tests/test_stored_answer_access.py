"""Who can read a stored answer: the admin opens one only for ``view_idempotency_body``;
``inspect_idempotency --show-body`` opens it and says when it was redacted or its key is gone;
purge never opens one (it works with no configured key able to).
"""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.test import Client, override_settings
from django.urls import path, reverse
from django.utils import timezone

from idempotency_django._protocol.redact import REDACTED_HEADER
from idempotency_django._protocol.responses import StoredResponse
from idempotency_django._storage import seal
from idempotency_django._storage.store.sql import Claim, record
from idempotency_django.models import IdempotencyEntry
from idempotency_django.purge import purge
from tests.factories import IdempotencyEntryFactory

urlpatterns = [path("admin/", admin.site.urls)]
pytestmark = [pytest.mark.django_db, pytest.mark.urls(__name__)]
SECRET = "tok_secret_4242"
KEY_A, KEY_B = seal.new_key(), seal.new_key()


def stored(key: str, headers: list[tuple[str, str]] | None = None) -> IdempotencyEntry:
    """A finished entry written as a request writes it: sealed under the keys in force."""
    now = timezone.now()
    entry = IdempotencyEntry.objects.create(
        tenant="", key=key, fingerprint="f", locked_until=now, created_at=now,
        expires_at=now + timedelta(hours=1),
    )  # fmt: skip
    answer = StoredResponse(201, headers or [("Content-Type", "application/json")], SECRET.encode())
    assert record(Claim("default", "", key, entry.owner), "completed", answer, timedelta(hours=1))
    return IdempotencyEntry.objects.get(pk=entry.pk)


def change_page(client: Client, entry: IdempotencyEntry) -> str:
    url = reverse("admin:idempotency_django_idempotencyentry_change", args=[entry.pk])
    response = client.get(url)
    assert response.status_code == 200
    return response.content.decode()


def staff(*permissions: str) -> Client:
    user = User.objects.create_user("support", password="x", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=permissions))
    client = Client()
    client.force_login(user)
    return client


def test_the_admin_shows_a_body_only_with_the_permission() -> None:
    entry = stored("k1")
    page = change_page(staff("view_idempotencyentry"), entry)
    assert SECRET not in page
    assert "bytes, sealed" in page
    User.objects.all().delete()
    page = change_page(staff("view_idempotencyentry", "view_idempotency_body"), entry)
    assert SECRET in page
    assert "application/json" in page


def test_the_admin_says_why_an_answer_does_not_open(admin_client: Client) -> None:
    with override_settings(IDEMPOTENCY_ENCRYPTION_KEYS=[KEY_A]):
        entry = stored("k2")
    with override_settings(IDEMPOTENCY_ENCRYPTION_KEYS=[KEY_B]):
        page = change_page(admin_client, entry)
    assert "sealed under a key no longer configured" in page
    assert SECRET not in page


def inspect(*args: str) -> str:
    out = io.StringIO()
    call_command("inspect_idempotency", *args, stdout=out)
    return out.getvalue()


def test_inspect_describes_a_sealed_answer_without_opening_it() -> None:
    stored("k3")
    out = inspect("k3")
    assert "sealed" in out
    assert SECRET not in out


def test_inspect_show_body_opens_it_and_says_when_it_was_redacted() -> None:
    stored("k4", [("Content-Type", "application/json"), (REDACTED_HEADER, "true")])
    out = inspect("k4", "--show-body")
    assert SECRET in out
    assert "note:            redacted before storing" in out


def test_inspect_show_body_says_when_the_key_is_no_longer_configured() -> None:
    with override_settings(IDEMPOTENCY_ENCRYPTION_KEYS=[KEY_A]):
        stored("k5")
    with override_settings(IDEMPOTENCY_ENCRYPTION_KEYS=[KEY_B]):
        out = inspect("k5", "--show-body")
    assert "cannot be opened: sealed under a key no longer configured" in out
    assert SECRET not in out


def test_purge_never_opens_an_answer() -> None:
    with override_settings(IDEMPOTENCY_ENCRYPTION_KEYS=[KEY_A]):
        stored("k6")
    IdempotencyEntry.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    with override_settings(IDEMPOTENCY_ENCRYPTION_KEYS=[KEY_B]):
        assert purge().expired == 1
    assert not IdempotencyEntry.objects.exists()


def test_reseal_counts_what_is_current_and_what_does_not_open() -> None:
    with override_settings(IDEMPOTENCY_ENCRYPTION_KEYS=[KEY_A]):
        stored("current")
    with override_settings(IDEMPOTENCY_ENCRYPTION_KEYS=[KEY_B]):
        stored("lost")
    with override_settings(IDEMPOTENCY_ENCRYPTION_KEYS=[KEY_A]):
        out = io.StringIO()
        call_command("reseal_idempotency", "--batch-size", "1", stdout=out)
    assert "0 resealed, 1 already under the newest key, 1 unreadable" in out.getvalue()


def test_inspect_show_body_of_a_claim_and_of_a_0_3_row() -> None:
    IdempotencyEntryFactory.create(key="running", in_progress=True)
    assert "no stored answer (in progress)" in inspect("running", "--show-body")
    IdempotencyEntryFactory.create(key="plain", response_body=SECRET.encode())
    out = inspect("plain", "--show-body")
    assert "stored in clear by 0.3" in out
    assert SECRET in out


def test_a_blob_that_is_not_sealed_does_not_open() -> None:
    for blob in (b"", b"\x09" + bytes(40), b"\x02short"):
        with pytest.raises(seal.Unreadable, match="not a sealed answer"):
            seal.opened("default", "", "k", seal.Sealed(201, "", blob))
    assert seal.is_sealed_row('{"sealed": 1}')
    assert not seal.is_sealed_row(b"[]")
