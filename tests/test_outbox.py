"""The outbox in-process: enqueue, the fast path, the relay, stats, purge, admin, command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connections, transaction
from django.db.models.functions import Now
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from idempotency_django import signals
from idempotency_django._protocol.core import IdempotencyContext
from idempotency_django._storage.secret import derive_key
from idempotency_django.outbox import OutboxError, delivery, enqueue
from idempotency_django.outbox.models import OutboxMessage
from tests.helpers import new_key, post

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.django_db


class Published(list[tuple[str, str]]):
    """A stand-in publisher: records (task, key); fails while ``down`` is set."""

    down = False

    def __call__(self, row: OutboxMessage, timeout: float | None = None) -> None:
        if self.down:
            raise ConnectionRefusedError("broker down")
        self.append((row.task, row.key))


@pytest.fixture
def published(monkeypatch: pytest.MonkeyPatch) -> Published:
    sink = Published()
    monkeypatch.setattr(delivery, "publish", sink)
    return sink


class Request:
    """What the outbox reads of a protected request: its ``request.idempotency``."""

    def __init__(self, key: str | None = "k1") -> None:
        self.idempotency = IdempotencyContext(key, tenant="")


def test_importing_the_outbox_does_not_import_celery() -> None:
    code = (
        "import sys, django; django.setup(); "
        "import idempotency_django.outbox, "
        "idempotency_django.outbox.admin, idempotency_django.outbox.delivery, "
        "idempotency_django.outbox.management.commands.relay_outbox; "
        "assert 'celery' not in sys.modules, 'celery was imported'"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True, timeout=60)


@pytest.mark.django_db(transaction=True)
def test_enqueue_outside_a_transaction_is_refused() -> None:
    with pytest.raises(OutboxError, match=r"inside transaction\.atomic"):
        enqueue("tests.receipt", "r1", key="k")
    assert not OutboxMessage.objects.exists()


def test_enqueue_outside_a_view_needs_a_key() -> None:
    with transaction.atomic(), pytest.raises(OutboxError, match="needs key="):
        enqueue("tests.receipt", "r1")
    with transaction.atomic(), pytest.raises(OutboxError, match="needs key="):
        enqueue("tests.receipt", "r1", request=Request(key=None))


def test_enqueue_records_the_task_in_the_transaction(
    published: Published, django_capture_on_commit_callbacks: Any
) -> None:
    class Task:
        name = "tests.receipt"

    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        key = enqueue(Task(), "r1", 2, key="order-1", options={"priority": 3}, note="x")
        row = OutboxMessage.objects.get()
        assert (row.key, row.task, row.args, row.kwargs) == (
            key,
            Task.name,
            ["r1", 2],
            {"note": "x"},
        )
        assert row.options == {"priority": 3}
        assert published == []  # nothing leaves before the commit
    assert published == [("tests.receipt", "order-1")]
    row.refresh_from_db()
    assert row.sent_at is not None
    assert (row.attempts, row.failures, row.last_error) == (1, 0, "")


def test_the_default_key_is_derived_from_the_protected_request() -> None:
    request = Request("abc")
    with transaction.atomic():
        key = enqueue("tests.receipt", request=request)
    execution = request.idempotency._execution
    assert key == derive_key("", "abc", f"tests.receipt#1\x1f{execution}")


def test_a_rolled_back_transaction_leaves_nothing_to_publish(
    published: Published, django_capture_on_commit_callbacks: Any
) -> None:
    def roll_back() -> None:
        with transaction.atomic():
            enqueue("tests.receipt", "r1", key="k1")
            raise RuntimeError("rolled back")

    with django_capture_on_commit_callbacks(execute=True) as callbacks, pytest.raises(RuntimeError):
        roll_back()
    assert callbacks == []
    assert published == []
    assert not OutboxMessage.objects.exists()


def test_a_failed_fast_path_leaves_the_row_to_the_relay(
    published: Published, django_capture_on_commit_callbacks: Any
) -> None:
    failures: list[dict[str, Any]] = []

    def on_failure(sender: str, **kwargs: Any) -> None:
        failures.append({"sender": sender, **kwargs})

    signals.outbox_failed.connect(on_failure)
    published.down = True
    try:
        with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
            enqueue("tests.receipt", "r1", key="k1")
    finally:
        signals.outbox_failed.disconnect(on_failure)
    row = OutboxMessage.objects.get()
    assert row.sent_at is None
    assert (row.attempts, row.failures) == (1, 1)
    assert "broker down" in row.last_error
    assert row.next_attempt_at > timezone.now()  # backed off
    assert [(f["sender"], f["task"], f["attempts"]) for f in failures] == [
        ("fast", "tests.receipt", 1)
    ]
    assert delivery.relay() == {"sent": 0, "failed": 0}  # not due yet
    published.down = False
    assert delivery.relay(ignore_schedule=True) == {"sent": 1, "failed": 0}
    assert published == [("tests.receipt", "k1")]
    row.refresh_from_db()
    assert (row.attempts, row.failures, row.sent_at is not None) == (2, 1, True)


def _pending(count: int, due: bool = True) -> list[OutboxMessage]:
    when = timezone.now() - timedelta(seconds=60 if due else -60)
    return [
        OutboxMessage.objects.create(key=f"k{i}", task="tests.receipt", next_attempt_at=when)
        for i in range(count)
    ]


def test_the_relay_publishes_due_rows_in_batches_once(published: Published) -> None:
    _pending(5)
    _pending(1, due=False)  # still the fast path's
    assert delivery.relay(batch_size=2) == {"sent": 5, "failed": 0}
    assert sorted(key for _, key in published) == [f"k{i}" for i in range(5)]
    assert delivery.relay(batch_size=2) == {"sent": 0, "failed": 0}
    assert OutboxMessage.objects.filter(sent_at__isnull=True).count() == 1


def test_the_relay_counts_failures_and_backs_off(published: Published) -> None:
    _pending(3)
    published.down = True
    assert delivery.relay() == {"sent": 0, "failed": 3}
    assert delivery.relay() == {"sent": 0, "failed": 0}
    assert delivery.stats().failing == 3


def test_a_relay_run_tries_each_row_once_even_ignoring_the_schedule() -> None:
    _pending(3)
    tried: list[int] = []

    def down(row: OutboxMessage) -> None:
        tried.append(row.pk)
        if len(tried) > 10:
            raise SystemExit("the relay keeps retrying rows it already tried in this run")
        raise ConnectionRefusedError("broker down")

    # relay_outbox --now: failed rows stay selectable, yet the run must end.
    assert delivery.relay(batch_size=1, publisher=down, ignore_schedule=True) == {
        "sent": 0,
        "failed": 3,
    }
    assert sorted(tried) == sorted(OutboxMessage.objects.values_list("pk", flat=True))


def test_stats_reads_pending_age_and_failures(published: Published) -> None:
    assert delivery.stats() == delivery.OutboxStats(0, 0.0, 0, 0)
    rows = _pending(3)
    OutboxMessage.objects.filter(pk=rows[0].pk).update(
        created_at=timezone.now() - timedelta(hours=1), failures=2
    )
    OutboxMessage.objects.filter(pk=rows[1].pk).update(sent_at=timezone.now(), failures=1)
    found = delivery.stats()
    assert (found.pending, found.failing, found.failures) == (2, 1, 2)
    assert 3500 < found.oldest_pending_seconds < 3700


def test_purge_sent_deletes_sent_rows_past_the_ttl() -> None:
    old, recent, pending = _pending(3)
    long_ago = timezone.now() - timedelta(days=2)
    OutboxMessage.objects.filter(pk=old.pk).update(sent_at=long_ago)
    OutboxMessage.objects.filter(pk=recent.pk).update(sent_at=timezone.now())
    OutboxMessage.objects.filter(pk=pending.pk).update(created_at=long_ago)
    assert delivery.purge_sent() == 1  # IDEMPOTENCY_TTL: 24 hours
    assert set(OutboxMessage.objects.values_list("pk", flat=True)) == {recent.pk, pending.pk}
    assert delivery.purge_sent(older_than=0) == 1
    assert delivery.purge_sent(older_than=timedelta(0)) == 0


def test_purge_sent_deletes_a_short_batch_at_a_time() -> None:
    rows = _pending(5)
    OutboxMessage.objects.update(sent_at=timezone.now() - timedelta(days=2))
    with CaptureQueriesContext(connections["default"]) as queries:
        assert delivery.purge_sent(batch_size=2) == len(rows)
    deletes = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("DELETE")]
    assert len(deletes) == 3  # 2 + 2 + 1: no statement holds more than a batch's locks
    assert not OutboxMessage.objects.exists()


def test_the_entries_purge_also_purges_sent_rows() -> None:
    from idempotency_django import purge

    old, pending = _pending(2)
    OutboxMessage.objects.filter(pk=old.pk).update(sent_at=timezone.now() - timedelta(days=2))
    purge.purge(dry_run=True)
    assert OutboxMessage.objects.count() == 2
    purge.purge()
    assert list(OutboxMessage.objects.values_list("pk", flat=True)) == [pending.pk]


@pytest.mark.parametrize(
    ("argument", "message"),
    [
        ("--batch-size=0", "--batch-size must be a positive integer"),
        ("--database=nowhere", "is not an alias in DATABASES"),
        ("--every=0", "--every takes a positive number of seconds"),
        ("--every=nan", "--every takes a positive number of seconds"),
        ("--every=-5", "--every takes a positive number of seconds"),
    ],
)
def test_the_command_refuses_bad_arguments(argument: str, message: str) -> None:
    with pytest.raises(CommandError, match=message):
        call_command("relay_outbox", argument)


def test_purge_sent_refuses_an_empty_batch_and_out_of_range_ages() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        delivery.purge_sent(batch_size=0)
    with pytest.raises(ValueError, match="out of range"):
        delivery.purge_sent(older_than=1e300)


def test_the_command_relays_and_reports(published: Published) -> None:
    _pending(2, due=False)
    out = StringIO()
    call_command("relay_outbox", "--batch-size=1", stdout=out)
    assert out.getvalue() == "outbox: 0 sent, 0 failed\n"
    call_command("relay_outbox", "--now", stdout=out)
    assert out.getvalue().endswith("outbox: 2 sent, 0 failed\n")
    assert len(published) == 2


def test_the_admin_lists_rows_read_only_with_the_numbers(
    outbox_urls: None, admin_client: Client
) -> None:
    _pending(2)
    response = admin_client.get("/admin/idempotency_outbox/outboxmessage/?state=pending")
    assert response.status_code == 200
    assert b"Pending: <strong>2</strong>" in response.content
    for state in ("failing", "sent"):
        assert (
            admin_client.get(f"/admin/idempotency_outbox/outboxmessage/?state={state}").status_code
            == 200
        )
    assert admin_client.get("/admin/idempotency_outbox/outboxmessage/add/").status_code == 403


@pytest.fixture
def outbox_urls(settings: Any) -> None:
    settings.ROOT_URLCONF = "tests.testapp.outbox_views"


@pytest.mark.django_db(transaction=True)
def test_a_protected_view_enqueues_under_its_derived_key(
    outbox_urls: None, published: Published, client: Client
) -> None:
    key = new_key()
    response = post(client, "/outbox/charges/", key, {"reference": "r1"})
    assert response.status_code == 201
    receipt_key = json.loads(response.content)["receipt_key"]
    assert published == [("tests.receipt", receipt_key)]
    assert receipt_key != key
    assert len(receipt_key) == 64  # derived (found without request=)
    replay = post(client, "/outbox/charges/", key, {"reference": "r1"})
    assert replay["Idempotent-Replayed"] == "true"
    assert OutboxMessage.objects.count() == 1
    assert published == [("tests.receipt", receipt_key)]


@pytest.mark.django_db(transaction=True)
def test_each_enqueue_of_one_task_in_a_view_gets_its_own_key(
    outbox_urls: None, published: Published, client: Client
) -> None:
    key = new_key()
    response = post(client, "/outbox/charges/", key, {"reference": "r1", "receipts": 3})
    assert response.status_code == 201
    keys = json.loads(response.content)["receipt_keys"]
    assert len(set(keys)) == 3
    assert sorted(published) == sorted(("tests.receipt", k) for k in keys)


def test_item1_each_execution_of_a_key_enqueues_under_keys_of_its_own() -> None:
    def keys(request: Request) -> list[str]:
        with transaction.atomic():
            return [
                enqueue("tests.receipt", 1, request=request),
                enqueue("tests.other", 1, request=request),
                enqueue("tests.receipt", 2, request=request),
            ]

    first = keys(Request("abc"))
    assert len(set(first)) == 3
    # The same key run again (its entry expired): a consumer keeping the last
    # execution's task ids must not take these for redeliveries.
    assert not set(keys(Request("abc"))) & set(first)


@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_view_publishes_nothing(
    outbox_urls: None, published: Published, client: Client
) -> None:
    response = post(client, "/outbox/charges/", new_key(), {"reference": "r1", "fail": True})
    assert response.status_code == 503
    assert not OutboxMessage.objects.exists()
    assert published == []


def test_the_prometheus_gauges_read_the_stats() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from idempotency_django.outbox import prometheus

    registry = CollectorRegistry()
    assert prometheus.register(registry) is prometheus.register(registry)
    _pending(2)
    text = generate_latest(registry).decode()
    assert "idempotency_outbox_pending 2.0" in text
    assert "idempotency_outbox_failing 0.0" in text
    assert "idempotency_outbox_oldest_pending_seconds" in text


def test_the_beat_task_relays(published: Published) -> None:
    from idempotency_django.outbox.tasks import relay_outbox

    _pending(3)
    assert relay_outbox.apply(kwargs={"batch_size": 2}).get() == {"sent": 3, "failed": 0}


def test_enqueue_costs_one_insert_and_the_fast_path_two_statements(
    published: Published, django_capture_on_commit_callbacks: Any
) -> None:
    from django.db import connection

    with (
        django_capture_on_commit_callbacks() as callbacks,
        transaction.atomic(),
        CaptureQueriesContext(connection) as inside,
    ):
        enqueue("tests.receipt", "r1", key="k1")
    assert [q["sql"].split()[0] for q in inside.captured_queries] == ["INSERT"]
    with CaptureQueriesContext(connection) as after:
        for callback in callbacks:
            callback()
    statements = [q["sql"].split()[0] for q in after.captured_queries]
    assert [s for s in statements if s in ("SELECT", "UPDATE")] == ["SELECT", "UPDATE"]
    assert published == [("tests.receipt", "k1")]


def test_the_fast_path_never_raises_into_the_request(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def database_gone(using: str) -> Any:
        raise RuntimeError("database gone")

    monkeypatch.setattr(delivery, "_locked", database_gone)
    delivery.publish_after_commit(1, "default")
    assert "could not publish row 1 after commit" in caplog.text


def test_the_gauges_are_skipped_when_the_stats_fail(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from idempotency_django.outbox.prometheus import OutboxCollector

    def fail(using: str | None = None) -> Any:
        raise RuntimeError("database gone")

    monkeypatch.setattr(delivery, "stats", fail)
    assert list(OutboxCollector().collect()) == []
    assert "stats unavailable" in caplog.text


def test_rows_read_well_and_the_package_names_its_exports() -> None:
    import idempotency_django.outbox as outbox

    assert str(OutboxMessage(task="tests.receipt", key="k1")) == "tests.receipt [k1]"
    assert outbox.stats is delivery.stats
    with pytest.raises(AttributeError):
        outbox.missing  # noqa: B018


@pytest.mark.parametrize("use_tz", [False, True])
def test_item7_stats_reads_the_oldest_age_with_or_without_use_tz(
    published: Published, settings: Any, use_tz: bool
) -> None:
    settings.USE_TZ = use_tz
    rows = _pending(2)
    OutboxMessage.objects.filter(pk=rows[0].pk).update(
        created_at=Now() - timedelta(hours=1), failures=1
    )
    found = delivery.stats()  # 0.2.0: TypeError (naive minus aware) without USE_TZ
    assert (found.pending, found.failing) == (2, 1)
    assert 3500 < found.oldest_pending_seconds < 3700


def test_item7_the_admin_page_and_gauges_stand_without_use_tz(
    outbox_urls: None, admin_client: Client, settings: Any
) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from idempotency_django.outbox.prometheus import OutboxCollector

    settings.USE_TZ = False
    _pending(1)
    assert admin_client.get("/admin/idempotency_outbox/outboxmessage/").status_code == 200
    registry = CollectorRegistry()
    registry.register(OutboxCollector())
    assert b"idempotency_outbox_pending 1.0" in generate_latest(registry)


@pytest.mark.django_db(transaction=True)
def test_item12_the_outbox_gauges_survive_prometheus_multiprocess_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    """The docs' gunicorn advice (PROMETHEUS_MULTIPROC_DIR): 0.2.0's /metrics lost them."""
    settings.ROOT_URLCONF = "sample_project.urls"
    settings.ALLOWED_HOSTS = ["*"]
    from idempotency_django.outbox import prometheus

    prometheus.register()  # what the outbox app's ready() does next to contrib.prometheus
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    _pending(2)
    response = Client().get("/metrics")
    assert response.status_code == 200, response
    body = response.content.decode()
    assert "idempotency_outbox_pending 2.0" in body
    assert "idempotency_outbox_oldest_pending_seconds" in body
