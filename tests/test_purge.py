"""The purge (core function and ``manage.py purge_idempotency``) and its safety rule."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.models.functions import Now
from django.test import Client, override_settings
from django.utils import timezone

from idempotency_django import purge
from idempotency_django.models import IdempotencyEntry
from tests import gates
from tests.conftest import close_connections_after
from tests.factories import IdempotencyEntryFactory
from tests.helpers import charges, new_key, post

Status = IdempotencyEntry.Status


def keys() -> set[str]:
    return set(IdempotencyEntry.objects.values_list("key", flat=True))


def make(count: int, **traits: Any) -> set[str]:
    return {entry.key for entry in IdempotencyEntryFactory.create_batch(count, **traits)}


@pytest.fixture
def batches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of every delete batch the purge runs."""
    sizes: list[int] = []
    real = purge._delete_batch

    def spy(*args: Any) -> tuple[int, Any]:
        deleted, frontier = real(*args)
        sizes.append(deleted)
        return deleted, frontier

    monkeypatch.setattr(purge, "_delete_batch", spy)
    return sizes


@pytest.mark.django_db
class TestPurge:
    def test_expired_entries_are_deleted_and_live_ones_kept(self) -> None:
        make(3, expired=True)
        make(2, expired=True, status=Status.FAILED_FINAL, response_status=404)
        live = make(2) | make(1, in_progress=True)
        result = purge.purge()
        assert result == purge.PurgeResult(expired=5, abandoned=0)
        assert keys() == live

    def test_abandoned_claims_are_reclaimed(self) -> None:
        make(2, abandoned=True)
        live = make(1, in_progress=True) | make(1)
        assert purge.purge().as_dict() == {"expired": 0, "abandoned": 2}
        assert keys() == live

    def test_an_expired_claim_counts_once_as_expired(self) -> None:
        make(1, abandoned=True, expired=True)
        assert purge.purge().as_dict() == {"expired": 1, "abandoned": 0}
        assert not keys()

    def test_finished_entries_are_kept_whatever_their_lease(self) -> None:
        live = make(1, locked_until=timezone.now() - timedelta(hours=1))
        assert purge.purge() == purge.PurgeResult(0, 0)
        assert keys() == live

    def test_dry_run_changes_nothing_and_counts_what_would_go(self) -> None:
        make(3, expired=True)
        make(2, abandoned=True)
        before = keys()
        counted = purge.purge(dry_run=True, batch_size=2)
        assert counted == purge.PurgeResult(expired=3, abandoned=2, dry_run=True)
        assert keys() == before
        assert purge.purge().as_dict() == counted.as_dict()

    def test_the_default_clock_is_the_databases(self, monkeypatch: pytest.MonkeyPatch) -> None:
        make(1)
        make(1, in_progress=True)
        # An app server far ahead (a purge host with a fast clock) deletes nothing live.
        later = timezone.now() + timedelta(hours=25)
        monkeypatch.setattr(timezone, "now", lambda: later)
        assert purge.purge().as_dict() == {"expired": 0, "abandoned": 0}
        IdempotencyEntry.objects.update(expires_at=Now() - timedelta(seconds=1))
        assert purge.purge().as_dict() == {"expired": 2, "abandoned": 0}

    def test_now_can_be_given(self) -> None:
        make(1, in_progress=True)
        soon = timezone.now() + timedelta(minutes=2)
        assert purge.purge(now=soon).as_dict() == {"expired": 0, "abandoned": 1}

    @override_settings(IDEMPOTENCY_DATABASE="elsewhere")
    def test_the_database_defaults_to_the_setting(self) -> None:
        with pytest.raises(ImproperlyConfigured, match="neither an alias"):
            purge.purge()
        assert purge.purge(using="default") == purge.PurgeResult(0, 0)

    @pytest.mark.parametrize("batch_size", [0, -1, True, 1.5, "10"])
    def test_batch_size_must_be_a_positive_int(self, batch_size: Any) -> None:
        with pytest.raises(ValueError, match="batch_size"):
            purge.purge(batch_size=batch_size)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("rows", "batch_size", "expected"),
    [
        (10, 3, [3, 3, 3, 1, 0]),
        (10, 5, [5, 5, 0, 0]),
        (4, 1, [1, 1, 1, 1, 0, 0]),
        (2, 1000, [2, 0]),
        (0, 1000, [0, 0]),
    ],
    ids=["remainder", "exact-multiple", "one-by-one", "one-batch", "nothing"],
)
def test_batches(rows: int, batch_size: int, expected: list[int], batches: list[int]) -> None:
    """Each kind runs full batches until one comes back short (expired, then abandoned)."""
    make(rows, expired=True)
    result = purge.purge(batch_size=batch_size)
    assert result.expired == rows
    assert batches == expected
    assert not keys()


@pytest.mark.django_db
def test_batches_ending_inside_equal_expiries_miss_nothing(batches: list[int]) -> None:
    """Each batch starts where the last one ended, ties included."""
    expiry = timezone.now() - timedelta(minutes=1)
    make(7, expires_at=expiry)
    make(2, expires_at=expiry - timedelta(seconds=1))
    assert purge.purge(batch_size=3).expired == 9
    assert batches == [3, 3, 3, 0, 0]
    assert not keys()


@pytest.mark.django_db
@pytest.mark.parametrize("batch_size", [1, 2, 3, 1000])
def test_dry_run_batches_count_every_row_once(batch_size: int) -> None:
    make(4, expired=True)
    make(3, abandoned=True)
    result = purge.purge(dry_run=True, batch_size=batch_size)
    assert result.as_dict() == {"expired": 4, "abandoned": 3}
    assert IdempotencyEntry.objects.count() == 7


@pytest.mark.django_db
def test_release_deletes_only_claims_whose_lease_has_passed() -> None:
    stuck = IdempotencyEntryFactory.create_batch(2, abandoned=True)
    fresh = IdempotencyEntryFactory.create(in_progress=True)
    done = IdempotencyEntryFactory.create(locked_until=timezone.now() - timedelta(hours=1))
    untouched = IdempotencyEntryFactory.create(abandoned=True)
    ids = [entry.pk for entry in [*stuck, fresh, done]]
    assert purge.release(ids) == 2
    assert keys() == {fresh.key, done.key, untouched.key}
    assert purge.release([]) == 0


@pytest.mark.django_db(transaction=True)
def test_a_reclaimed_key_behaves_as_new() -> None:
    client = Client()
    key = new_key()
    IdempotencyEntryFactory.create(key=key, abandoned=True, fingerprint="f" * 64)
    assert purge.purge().abandoned == 1
    response = post(client, "/charges/", key)
    assert response.status_code == 201
    assert "Idempotent-Replayed" not in response
    assert charges(key) == 1


HELD = {"hold": True}  # the view waits at the test's gate after its write (tests.gates)


def _start_held_request(key: str, results: list[Any]) -> threading.Thread:
    """POST to the 0.5 s-lease view, on a real thread; it waits at ``key``'s gate."""

    def request() -> None:
        results.append(post(Client(), "/charges/short-lease/", key, HELD))

    thread = threading.Thread(target=close_connections_after(request))
    thread.start()
    return thread


def _wait_until_lease_passed(key: str, within: float = 300) -> IdempotencyEntry:
    """Until the claim's lease has passed (polled; ``within`` only bounds a broken run)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        entry = IdempotencyEntry.objects.filter(key=key, status=Status.IN_PROGRESS).first()
        if entry is not None and entry.locked_until < timezone.now() - timedelta(seconds=0.1):
            return entry
        time.sleep(0.05)
    raise AssertionError("the held request never held a claim past its lease")


def _while_request_runs(key: str, check: Callable[[IdempotencyEntry], None]) -> Any:
    """Run ``check`` while the request waits at its gate, its lease passed; its response."""
    results: list[Any] = []
    with gates.armed(key) as gate:
        thread = _start_held_request(key, results)
        try:
            gate.wait_arrival()
            entry = _wait_until_lease_passed(key)
            check(entry)
            assert thread.is_alive()  # held at its gate: the checks met a running request
        finally:
            gate.released.set()
            thread.join(300)
    return results[0]


@pytest.mark.requires_server
@pytest.mark.django_db(transaction=True)
@override_settings(IDEMPOTENCY_PROTOCOL="lease")  # only "lease" leaves a committed claim
def test_a_claim_held_by_a_running_request_is_neither_deleted_nor_reclaimed() -> None:
    key = new_key()

    def check(entry: IdempotencyEntry) -> None:
        assert purge.purge(dry_run=True) == purge.PurgeResult(0, 0, dry_run=True)
        assert purge.purge(batch_size=1) == purge.PurgeResult(0, 0)
        assert purge.release([entry.pk]) == 0
        assert IdempotencyEntry.objects.filter(pk=entry.pk, owner=entry.owner).exists()

    response = _while_request_runs(key, check)
    assert response.status_code == 201
    replay = post(Client(), "/charges/short-lease/", key, HELD)
    assert replay["Idempotent-Replayed"] == "true"
    assert replay.content == response.content
    assert charges(key) == 1


@pytest.mark.django_db(transaction=True)
def test_on_sqlite_a_purge_waits_for_the_running_request_then_keeps_its_answer() -> None:
    if connection.vendor != "sqlite":
        pytest.skip("SQLite serialises writers; servers are covered by the SKIP LOCKED test")
    key = new_key()

    results: list[Any] = []
    purged: list[purge.PurgeResult] = []
    with gates.armed(key) as gate:
        thread = _start_held_request(key, results)
        gate.wait_arrival()
        _wait_until_lease_passed(key)
        # SQLite serialises writers: the purge waits for the request's write lock, whenever
        # it runs, and by then the entry is final.
        purger = threading.Thread(
            target=close_connections_after(lambda: purged.append(purge.purge()))
        )
        purger.start()
    thread.join(300)
    purger.join(300)
    assert purged == [purge.PurgeResult(0, 0)]
    assert results[0].status_code == 201
    assert post(Client(), "/charges/short-lease/", key, HELD).status_code == 201
    assert IdempotencyEntry.objects.get(key=key).status == Status.COMPLETED
    assert charges(key) == 1


def purge_command(*args: str) -> list[str]:
    out = StringIO()
    assert call_command("purge_idempotency", *args, stdout=out) is None
    return out.getvalue().splitlines()


@pytest.mark.django_db
class TestCommand:
    def test_prints_one_summary_line(self) -> None:
        make(2, expired=True)
        make(1, abandoned=True)
        assert purge_command() == [
            "Deleted 2 expired and 1 abandoned in-progress entries from 'default'."
        ]
        assert not keys()

    def test_dry_run_says_would_and_changes_nothing(self) -> None:
        make(2, expired=True)
        make(1, abandoned=True)
        assert purge_command("--dry-run") == [
            "Dry run: would delete 2 expired and 1 abandoned in-progress entries from 'default'."
        ]
        assert IdempotencyEntry.objects.count() == 3

    def test_batch_size_and_database(self, batches: list[int]) -> None:
        make(5, expired=True)
        lines = purge_command("--batch-size", "2", "--database", "default")
        assert lines == ["Deleted 5 expired and 0 abandoned in-progress entries from 'default'."]
        assert batches == [2, 2, 1, 0]

    def test_verbosity_0_is_silent_on_success(self) -> None:
        make(2, expired=True)
        assert purge_command("-v", "0") == []
        assert not keys()

    @pytest.mark.parametrize("value", ["0", "-3", "abc", "1.5"])
    def test_invalid_batch_size_is_a_command_error(self, value: str) -> None:
        with pytest.raises(CommandError, match="--batch-size"):
            purge_command("--batch-size", value)

    def test_unknown_database_is_a_command_error(self) -> None:
        with pytest.raises(CommandError, match="'nowhere' is not an alias"):
            purge_command("--database", "nowhere")
