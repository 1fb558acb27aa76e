"""The admin's overview of the entries: counts by status and answer over the last hour and
day, a chart drawn server-side, the oldest key in flight, dead letters waiting, and only
what the viewing user may see; a bounded number of queries, whatever the table's size."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import path, reverse
from django.utils import timezone

from idempotency_django._operations import glance, overview
from idempotency_django.consumers.models import ConsumerFailure
from idempotency_django.models import IdempotencyEntry
from idempotency_django.outbox import overview as outbox_overview
from idempotency_django.outbox.models import OutboxMessage
from tests.factories import IdempotencyEntryFactory

urlpatterns = [path("admin/", admin.site.urls)]
pytestmark = [pytest.mark.django_db, pytest.mark.urls(__name__)]
OVERVIEW = "admin:idempotency_django_idempotencyentry_overview"
Status = IdempotencyEntry.Status


def ago(**delta: float) -> datetime:
    return timezone.now() - timedelta(**delta)


def page(client: Client) -> str:
    response = client.get(reverse(OVERVIEW))
    assert response.status_code == 200
    return str(response.content.decode())


def section(html: str, name: str) -> str:
    found = re.search(rf'<section[^>]*id="idem-{name}".*?</section>', html, re.S)
    assert found, f"no {name} panel"
    return found.group(0)


def cells(html: str) -> list[list[str]]:
    rows = re.findall(r"<tr>(.*?)</tr>", html, re.S)
    return [
        [
            re.sub(r"<[^>]+>", "", c).strip()
            for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", r, re.S)
        ]
        for r in rows
    ]


def test_the_entries_list_links_to_the_overview(admin_client: Client) -> None:
    listing = admin_client.get(reverse("admin:idempotency_django_idempotencyentry_changelist"))
    assert f'href="{reverse(OVERVIEW)}"' in listing.content.decode()


def test_counts_by_status_and_answer_over_the_hour_and_the_day(admin_client: Client) -> None:
    IdempotencyEntryFactory.create_batch(2, created_at=ago(minutes=5))
    IdempotencyEntryFactory.create(created_at=ago(hours=3))
    IdempotencyEntryFactory.create(
        created_at=ago(hours=2), status=Status.FAILED_FINAL, response_status=404
    )
    IdempotencyEntryFactory.create(in_progress=True, created_at=ago(minutes=1))
    IdempotencyEntryFactory.create(created_at=ago(days=2))  # outside both windows
    counts = cells(section(page(admin_client), "window"))
    assert counts[1:] == [
        ["Completed", "2xx", "2", "3"],
        ["Failed (final)", "4xx", "0", "1"],
        ["In progress", "-", "1", "1"],
    ]


def test_an_empty_table_says_so(admin_client: Client) -> None:
    html = page(admin_client)
    assert "No entry in the last day." in section(html, "window")
    assert cells(section(html, "in-flight"))[1] == ["oldest", "-"]


def test_past_the_bound_the_page_says_how_far_back_it_counted(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(overview, "COUNTED", 2)
    for minutes in (50, 40, 30, 20):
        IdempotencyEntryFactory.create(created_at=ago(minutes=minutes))
    window = section(page(admin_client), "window")
    assert cells(window)[1] == ["Completed", "2xx", "2", "2"]  # the newest two only
    assert 'id="idem-reaches-back"' in window


def test_a_day_under_the_bound_is_counted_whole(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(overview, "COUNTED", 2)
    IdempotencyEntryFactory.create(created_at=ago(days=3))
    IdempotencyEntryFactory.create(created_at=ago(days=2))
    IdempotencyEntryFactory.create(created_at=ago(minutes=5))
    window = section(page(admin_client), "window")
    assert cells(window)[1] == ["Completed", "2xx", "1", "1"]
    assert "idem-reaches-back" not in window


def test_the_chart_is_inline_svg_a_bar_per_hour(admin_client: Client) -> None:
    IdempotencyEntryFactory.create_batch(3, created_at=ago(minutes=1))
    chart = section(page(admin_client), "chart")
    assert "<script" not in chart
    assert chart.count("<g><title>") == overview.HOURS
    assert 'height="100" fill="#2e7d32"' in chart  # the fullest bar, all completed


def test_bars_stack_by_status_scaled_to_the_fullest() -> None:
    now = timezone.now()
    hour = timezone.localtime(now).replace(minute=0, second=0, microsecond=0)
    per_hour: dict[datetime, dict[str, int]] = {
        hour: {Status.COMPLETED: 2, Status.IN_PROGRESS: 2},
        hour - timedelta(hours=1): {Status.FAILED_FINAL: 1},
    }
    bars = overview.chart(per_hour, now)
    assert bars[-1].segments == [(50, 50, "#2e7d32"), (0, 50, "#f9a825")]
    assert bars[-2].segments == [(75, 25, "#c62828")]
    assert bars[-1].title.endswith("2 completed, 0 failed (final), 2 in progress")
    assert bars[0].segments == []


def test_the_oldest_key_in_flight_links_to_it_without_its_tenant(admin_client: Client) -> None:
    IdempotencyEntryFactory.create(in_progress=True, created_at=ago(seconds=30))
    oldest = IdempotencyEntryFactory.create(
        in_progress=True, created_at=ago(minutes=10), tenant="tenant-of-someone", key="old-key"
    )
    IdempotencyEntryFactory.create(expires_at=ago(minutes=30))
    html = page(admin_client)
    flight = section(html, "in-flight")
    change = reverse("admin:idempotency_django_idempotencyentry_change", args=[oldest.pk])
    assert f'href="{change}?_changelist_filters=database%3Ddefault"' in flight
    rows = cells(flight)
    assert rows[0] == ["keys in flight", "2"]
    assert rows[1][1].startswith("old-key, ")
    assert 1800 <= int(rows[2][1].removesuffix(" s").replace(",", "")) < 3600
    assert "tenant-of-someone" not in html


def test_dead_letters_waiting_with_links(admin_client: Client) -> None:
    OutboxMessage.objects.create(key="k1", task="t", dead_at=timezone.now())
    OutboxMessage.objects.create(key="k2", task="t")
    ConsumerFailure.objects.create(key="s\x1fa", failures=5, dead_at=timezone.now())
    html = page(admin_client)
    outbox = section(html, "outbox")
    assert cells(outbox)[0] == ["pending", "1"]
    assert cells(outbox)[2] == ["dead letters waiting", "1"]
    assert "/admin/idempotency_outbox/outboxmessage/?state=dead" in outbox
    consumers = section(html, "consumers")
    assert cells(consumers) == [["failing", "0"], ["dead letters waiting", "1"]]
    assert "/admin/idempotency_consumers/consumerfailure/?state=dead" in consumers


def staff(*codenames: str) -> Client:
    user = User.objects.create_user("staff", password="x", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client


def test_panels_only_for_models_the_user_may_view() -> None:
    html = page(staff("view_idempotencyentry"))
    assert 'id="idem-window"' in html
    assert 'id="idem-outbox"' not in html
    assert 'id="idem-consumers"' not in html


def test_the_outbox_panel_for_a_user_who_may_view_the_outbox() -> None:
    html = page(staff("view_idempotencyentry", "view_outboxmessage"))
    assert 'id="idem-outbox"' in html
    assert 'id="idem-consumers"' not in html


def test_no_overview_without_the_entries_view_permission() -> None:
    client = staff("view_outboxmessage")
    assert client.get(reverse(OVERVIEW)).status_code == 403


def test_the_overview_needs_a_staff_login() -> None:
    response = Client().get(reverse(OVERVIEW))
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]


def test_without_the_outbox_and_consumers_apps_no_panels(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(overview, "_panels", {})  # what the outbox app registers
    monkeypatch.setattr(glance, "consumers_installed", lambda: False)
    html = page(admin_client)
    assert 'id="idem-outbox"' not in html
    assert 'id="idem-consumers"' not in html


def test_the_outbox_app_registers_its_panel() -> None:
    assert overview._panels["outbox"] is outbox_overview.panel


def queries(client: Client) -> int:
    with CaptureQueriesContext(connection) as captured:
        page(client)
    return len(captured)


def test_the_query_count_does_not_grow_with_the_table(admin_client: Client) -> None:
    IdempotencyEntryFactory.create(in_progress=True)
    few = queries(admin_client)
    IdempotencyEntryFactory.create_batch(40, created_at=ago(minutes=30))
    IdempotencyEntryFactory.create_batch(5, in_progress=True)
    assert queries(admin_client) == few


def test_the_window_groups_by_status_answer_and_hour_only() -> None:
    """The admin's ordering (``-id``) kept in the GROUP BY made a group per row: seconds
    on a big table."""
    IdempotencyEntryFactory.create_batch(3, created_at=ago(minutes=1))
    with CaptureQueriesContext(connection) as captured:
        overview.window(IdempotencyEntry.objects.order_by("-id"))
    grouped = [q["sql"] for q in captured if "GROUP BY" in q["sql"]]
    assert len(grouped) == 1
    assert "id" not in grouped[0].partition("GROUP BY")[2].replace('"', " ").split()
