"""The log receivers (``idempotency_django._operations.log``), driven by sending the signals directly."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from idempotency_django import signals
from idempotency_django._operations import log

KEY = "sk_live_bearer-secret-key"
DIGEST = signals.key_digest("tenant-1", KEY)


def outcome_fields(**overrides: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "outcome": signals.EXECUTED,
        "method": "POST",
        "route": "create-charge",
        "status": 201,
        "stored": True,
        "source": None,
        "protocol": "lease",
        "claim_seconds": 0.0012,
        "waited_seconds": 0.0,
        "total_seconds": 0.0153,
        "key_digest": DIGEST,
    }
    return fields | overrides


@pytest.fixture
def logged(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG, logger="idempotency_django")
    return caplog


def send_outcome(sender: str = "http", **overrides: Any) -> None:
    signals.send(signals.outcome, sender, **outcome_fields(**overrides))


def test_the_app_connects_the_receivers() -> None:
    for signal, uid in [
        (signals.outcome, "idempotency_django.log.outcome"),
        (signals.entry_reclaimed, "idempotency_django.log.reclaimed"),
        (signals.purge_finished, "idempotency_django.log.purge"),
    ]:
        assert any(lookup[0] == uid for lookup, *_ in signal.receivers)


def test_connecting_again_adds_no_second_receiver() -> None:
    before = len(signals.outcome.receivers)
    log.connect()
    assert len(signals.outcome.receivers) == before


def test_executed_line(logged: pytest.LogCaptureFixture) -> None:
    send_outcome()
    (record,) = logged.records
    assert record.levelno == logging.DEBUG
    assert record.getMessage() == (
        f"idempotency executed (stored): POST create-charge -> 201, key {DIGEST}, "
        "claim 1.2 ms, total 15.3 ms"
    )
    assert record.key_digest == DIGEST  # type: ignore[attr-defined]
    assert record.idempotency_outcome == "executed"  # type: ignore[attr-defined]
    assert record.idempotency_route == "create-charge"  # type: ignore[attr-defined]
    assert record.idempotency_method == "POST"  # type: ignore[attr-defined]
    assert record.idempotency_status == 201  # type: ignore[attr-defined]


def test_discarded_execution_says_so(logged: pytest.LogCaptureFixture) -> None:
    send_outcome(status=503, stored=False)
    assert (
        logged.records[0]
        .getMessage()
        .startswith("idempotency executed (discarded): POST create-charge -> 503,")
    )


def test_a_view_that_raised_has_no_status(logged: pytest.LogCaptureFixture) -> None:
    send_outcome(status=None, stored=False)
    assert (
        logged.records[0]
        .getMessage()
        .startswith("idempotency executed (discarded): POST create-charge -> exception,")
    )


def test_replay_names_its_source_and_waiting_is_shown(logged: pytest.LogCaptureFixture) -> None:
    send_outcome(outcome=signals.REPLAYED, stored=None, source="cache", waited_seconds=0.25)
    (record,) = logged.records
    assert record.levelno == logging.DEBUG
    assert record.getMessage() == (
        f"idempotency replayed (cache): POST create-charge -> 201, key {DIGEST}, "
        "claim 1.2 ms, waited 250.0 ms, total 15.3 ms"
    )


@pytest.mark.parametrize(
    ("outcome", "status"),
    [
        (signals.IN_PROGRESS, 409),
        (signals.KEY_REUSED, 422),
        (signals.KEY_MISSING, 400),
        (signals.KEY_MALFORMED, 400),
        (signals.UNAVAILABLE, 503),
    ],
)
def test_refusals_are_info(logged: pytest.LogCaptureFixture, outcome: str, status: int) -> None:
    send_outcome(outcome=outcome, status=status, stored=None)
    (record,) = logged.records
    assert record.levelno == logging.INFO
    assert record.getMessage().startswith(f"idempotency {outcome}: POST create-charge -> {status},")


def test_every_outcome_has_a_level() -> None:
    assert set(log.LEVELS) == signals.OUTCOMES


def test_a_request_without_a_key_logs_a_dash(logged: pytest.LogCaptureFixture) -> None:
    send_outcome(
        outcome=signals.KEY_MISSING,
        status=400,
        stored=None,
        protocol=None,
        claim_seconds=None,
        key_digest=None,
        total_seconds=0.0004,
    )
    assert logged.records[0].getMessage() == (
        "idempotency key_missing: POST create-charge -> 400, key -, total 0.4 ms"
    )
    assert logged.records[0].key_digest is None  # type: ignore[attr-defined]


def test_tasks_and_calls_are_named_by_sender(logged: pytest.LogCaptureFixture) -> None:
    send_outcome("task", method=None, route=None, status=None, claim_seconds=None)
    assert (
        logged.records[0].getMessage()
        == f"idempotency executed (stored): task, key {DIGEST}, total 15.3 ms"
    )


def test_the_key_itself_never_appears(logged: pytest.LogCaptureFixture) -> None:
    for outcome in sorted(signals.OUTCOMES):
        send_outcome(outcome=outcome)
    assert len(logged.records) == len(signals.OUTCOMES)
    for record in logged.records:
        assert KEY not in record.getMessage()
        assert KEY not in repr(record.__dict__)


def test_nothing_is_formatted_when_the_level_is_off(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(*args: Any) -> str:
        raise AssertionError("formatted although the level is off")

    caplog.set_level(logging.WARNING, logger="idempotency_django")
    monkeypatch.setattr(log, "_where", fail)
    monkeypatch.setattr(log, "_timings", fail)
    for outcome in sorted(signals.OUTCOMES):
        send_outcome(outcome=outcome)
    signals.send(signals.purge_finished, "purge", expired=1, abandoned=0, dry_run=False)
    signals.send(signals.entry_reclaimed, "purge", how="purge", count=1, database="default")
    assert caplog.records == []


def test_purge_summary_is_a_readable_line(logged: pytest.LogCaptureFixture) -> None:
    signals.send(
        signals.purge_finished,
        "purge",
        expired=12,
        abandoned=3,
        dry_run=False,
        database="default",
        seconds=0.4213,
    )
    (record,) = logged.records
    assert record.levelno == logging.INFO
    assert record.getMessage() == (
        "idempotency purge on 'default': deleted 12 expired and 3 abandoned entries in 0.42 s"
    )


def test_dry_run_purge_says_would(logged: pytest.LogCaptureFixture) -> None:
    signals.send(
        signals.purge_finished,
        "purge",
        expired=2,
        abandoned=0,
        dry_run=True,
        database="default",
        seconds=0.01,
    )
    assert logged.records[0].getMessage() == (
        "idempotency purge on 'default' (dry run): would delete 2 expired and 0 abandoned "
        "entries in 0.01 s"
    )


@pytest.mark.parametrize(("count", "noun"), [(1, "entry"), (3, "entries")])
def test_reclaimed_line(logged: pytest.LogCaptureFixture, count: int, noun: str) -> None:
    signals.send(signals.entry_reclaimed, "store", how="takeover", count=count, database="default")
    (record,) = logged.records
    assert record.levelno == logging.INFO
    assert record.getMessage() == (
        f"idempotency reclaimed {count} abandoned {noun} on 'default' (takeover)"
    )
