"""The read-only admin and its "release stuck in-progress entries" action."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import path, reverse
from django.utils import timezone

from idempotency_django.calls import namespaced
from idempotency_django.models import IdempotencyEntry
from tests.factories import IdempotencyEntryFactory

# This module is its own URLconf: the test app's URLs don't mount the admin.
urlpatterns = [path("admin/", admin.site.urls)]
pytestmark = [pytest.mark.faces, pytest.mark.django_db, pytest.mark.urls(__name__)]
SECRET_BODY = b'{"card": "tok_secret_4242"}'


def url(view: str, *args: Any) -> str:
    return reverse(f"admin:idempotency_django_idempotencyentry_{view}", args=args)


def change_url(entry: IdempotencyEntry) -> str:
    return url("change", entry.pk)


def listed(response: Any) -> set[str]:
    return {entry.key for entry in response.context["cl"].result_list}


def release(client: Client, *entries: IdempotencyEntry) -> Any:
    data = {"action": "release_stuck", "_selected_action": [e.pk for e in entries]}
    return client.post(url("changelist"), data, follow=True)


def test_changelist_renders_the_columns(admin_client: Client) -> None:
    entry = IdempotencyEntryFactory.create(tenant="acme", key="order-17", response_status=201)
    response = admin_client.get(url("changelist"))
    assert response.status_code == 200
    assert listed(response) == {"order-17"}
    for text in ("order-17", "acme", "Completed", "201", "Expires at", "Created at"):
        assert text in response.content.decode(), text
    assert entry.fingerprint not in response.content.decode()


def test_a_task_key_is_shown_with_its_scope_apart(admin_client: Client) -> None:
    IdempotencyEntryFactory.create(key=namespaced("receipts", "evt_1"))
    page = admin_client.get(url("changelist")).content.decode()
    assert "[receipts] evt_1" in page
    assert "\x1f" not in page


def test_a_long_tenant_is_cut_in_the_changelist_and_whole_in_its_tooltip(
    admin_client: Client,
) -> None:
    tenant = "session:" + "d" * 64  # a visitor's key space: a digest of their session mark
    IdempotencyEntryFactory.create(tenant=tenant, key="order-18")
    page = admin_client.get(url("changelist")).content.decode()
    assert f'<span title="{tenant}">{tenant[:19]}…</span>' in page


@pytest.mark.parametrize(("query", "expected"), [("order-1", {"order-1"}), ("acme", {"order-1"})])
def test_search_by_key_and_tenant(admin_client: Client, query: str, expected: set[str]) -> None:
    IdempotencyEntryFactory.create(tenant="acme", key="order-1")
    IdempotencyEntryFactory.create(tenant="globex", key="order-2")
    assert listed(admin_client.get(url("changelist"), {"q": query})) == expected


def test_filters_by_status_and_expiry(admin_client: Client) -> None:
    IdempotencyEntryFactory.create(key="done")
    IdempotencyEntryFactory.create(key="running", in_progress=True)
    IdempotencyEntryFactory.create(key="old", expired=True)
    changelist = url("changelist")
    assert listed(admin_client.get(changelist, {"status__exact": "in_progress"})) == {"running"}
    assert listed(admin_client.get(changelist, {"expired": "yes"})) == {"old"}
    assert listed(admin_client.get(changelist, {"expired": "no"})) == {"done", "running"}


def test_detail_is_read_only_and_shows_the_body_by_size_and_type(db: None) -> None:
    # A viewer without view_idempotency_body (tests/test_stored_answer_access.py: with it).
    viewer = User.objects.create_user("viewer", password="x", is_staff=True)
    viewer.user_permissions.set(Permission.objects.filter(codename="view_idempotencyentry"))
    client = Client()
    client.force_login(viewer)
    entry = IdempotencyEntryFactory.create(response_body=SECRET_BODY)
    page = client.get(change_url(entry)).content.decode()
    assert f"{len(SECRET_BODY)} bytes, application/json" in page
    assert "tok_secret_4242" not in page
    assert 'name="_save"' not in page


def test_detail_of_a_claim_has_no_body(admin_client: Client) -> None:
    entry = IdempotencyEntryFactory.create(in_progress=True)
    assert admin_client.get(change_url(entry)).status_code == 200


def test_nothing_can_be_added_changed_or_deleted(admin_client: Client) -> None:
    entry = IdempotencyEntryFactory.create()
    add, delete = url("add"), url("delete", entry.pk)
    assert admin_client.get(add).status_code == 403
    assert admin_client.post(delete, {"post": "yes"}).status_code == 403
    assert admin_client.post(change_url(entry), {"key": "changed"}).status_code == 403
    assert IdempotencyEntry.objects.get().key == entry.key
    actions = admin_client.get(url("changelist")).context["action_form"].fields["action"].choices
    assert [name for name, _ in actions if name] == ["release_stuck"]


def test_release_action_releases_abandoned_entries_and_refuses_live_ones(
    admin_client: Client,
) -> None:
    stuck = IdempotencyEntryFactory.create(abandoned=True)
    live = IdempotencyEntryFactory.create(in_progress=True)
    done = IdempotencyEntryFactory.create(locked_until=timezone.now() - timedelta(hours=1))
    response = release(admin_client, stuck, live, done)
    assert "Released 1 stuck in-progress entry; skipped 2" in response.content.decode()
    assert set(IdempotencyEntry.objects.values_list("pk", flat=True)) == {live.pk, done.pk}


def test_release_action_reports_when_nothing_was_released(admin_client: Client) -> None:
    live = IdempotencyEntryFactory.create(in_progress=True)
    response = release(admin_client, live)
    assert "Released 0 stuck in-progress entries; skipped 1" in response.content.decode()
    assert IdempotencyEntry.objects.filter(pk=live.pk).exists()


def test_release_action_counts_in_the_plural(admin_client: Client) -> None:
    stuck = IdempotencyEntryFactory.create_batch(2, abandoned=True)
    response = release(admin_client, *stuck)
    assert "Released 2 stuck in-progress entries; skipped 0" in response.content.decode()


@pytest.mark.parametrize(("perms", "has_action"), [(["view"], False), (["view", "delete"], True)])
def test_release_needs_the_delete_permission(perms: list[str], has_action: bool) -> None:
    user = User.objects.create_user("operator", password="pw", is_staff=True)
    for perm in perms:
        user.user_permissions.add(Permission.objects.get(codename=f"{perm}_idempotencyentry"))
    client = Client()
    client.force_login(user)
    stuck = IdempotencyEntryFactory.create(abandoned=True)
    response = client.get(url("changelist"))
    assert response.status_code == 200
    assert ("release_stuck" in response.content.decode()) is has_action
    release(client, stuck)
    assert IdempotencyEntry.objects.filter(pk=stuck.pk).exists() is not has_action
