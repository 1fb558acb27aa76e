"""An outbox row whose broker always refuses stops after IDEMPOTENCY_OUTBOX_MAX_ATTEMPTS,
becomes a dead letter (admin, metric, signal), and after "send again" is delivered under
its own key: a consumer runs it once."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import Client
from django.utils import timezone

from idempotency_django import signals
from idempotency_django._operations.checks import check_outbox_max_attempts as check_max_attempts
from idempotency_django.consumers import consume
from idempotency_django.outbox import delivery
from idempotency_django.outbox.models import OutboxMessage
from tests.testapp.models import Charge

pytestmark = pytest.mark.django_db
CHANGELIST = "/admin/idempotency_outbox/outboxmessage/"


class Broker:
    """Refuses every publish while ``down``; up, it delivers each row twice (at least once)
    to a consumer that charges once per key."""

    def __init__(self) -> None:
        self.down = True
        self.refused = 0
        self.delivered: list[str] = []

    def __call__(self, row: OutboxMessage, timeout: float | None = None) -> None:
        if self.down:
            self.refused += 1
            raise ConnectionRefusedError("broker refuses")
        for _ in range(2):
            self.delivered.append(row.key)
            verdict = consume(row.key, lambda: charge(row.key), scope="receipts")
            assert verdict.action == "ack"


def charge(key: str) -> None:
    Charge.objects.create(reference=key, amount=1)


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch, settings: Any) -> Broker:
    settings.IDEMPOTENCY_OUTBOX_MAX_ATTEMPTS = 3
    settings.ROOT_URLCONF = "tests.testapp.outbox_views"
    refusing = Broker()
    monkeypatch.setattr(delivery, "publish", refusing)
    return refusing


@pytest.fixture
def dead_letters() -> Any:
    seen: list[dict[str, Any]] = []

    def receiver(sender: str, **kwargs: Any) -> None:
        seen.append({"sender": sender, **kwargs})

    signals.dead_lettered.connect(receiver)
    yield seen
    signals.dead_lettered.disconnect(receiver)


def _row() -> OutboxMessage:
    due = timezone.now() - timedelta(minutes=1)
    return OutboxMessage.objects.create(key="order-7", task="tests.receipt", next_attempt_at=due)


def _exhaust(broker: Broker, attempts: int = 5) -> None:
    from django.test import TestCase

    for _ in range(attempts):
        # The dead letter's signal goes after the relay's commit.
        with TestCase.captureOnCommitCallbacks(execute=True):
            delivery.relay(ignore_schedule=True)


def test_a_row_the_broker_always_refuses_stops_after_its_policy(
    broker: Broker, dead_letters: list[dict[str, Any]]
) -> None:
    row = _row()
    _exhaust(broker)
    assert broker.refused == 3  # the 4th and 5th relay runs left it alone
    row.refresh_from_db()
    assert row.dead_at is not None
    assert row.sent_at is None
    assert row.failures == 3
    found = delivery.stats()
    assert (found.pending, found.dead) == (0, 1)
    assert [(d["sender"], d["attempts"], d["uncertain"]) for d in dead_letters] == [
        ("outbox", 3, False)
    ]
    assert dead_letters[0]["key_digest"] == signals.key_digest("", "order-7")


def test_without_a_cap_a_row_is_retried_for_ever(broker: Broker, settings: Any) -> None:
    settings.IDEMPOTENCY_OUTBOX_MAX_ATTEMPTS = None
    _row()
    _exhaust(broker, 6)
    assert broker.refused == 6
    assert delivery.stats().dead == 0


def test_the_admin_shows_it_and_send_again_delivers_it_once_under_its_key(
    broker: Broker, admin_client: Client
) -> None:
    row = _row()
    _exhaust(broker)
    listed = admin_client.get(CHANGELIST + "?state=dead")
    assert b"order-7" in listed.content
    assert b"dead letters: <strong>1</strong>" in listed.content
    assert b"order-7" not in admin_client.get(CHANGELIST + "?state=pending").content
    broker.down = False
    answer = admin_client.post(
        CHANGELIST, {"action": "send_again", "_selected_action": [row.pk]}, follow=True
    )
    assert b"1 dead letter(s) sent again" in answer.content
    delivery.relay()
    delivery.relay()
    assert broker.delivered == ["order-7", "order-7"]  # delivered twice, its key unchanged
    assert Charge.objects.filter(reference="order-7").count() == 1  # run once
    row.refresh_from_db()
    assert row.sent_at is not None
    assert row.dead_at is None


def test_discard_deletes_dead_letters_only(broker: Broker, admin_client: Client) -> None:
    dead = _row()
    _exhaust(broker)
    alive = OutboxMessage.objects.create(key="other", task="tests.receipt")
    answer = admin_client.post(
        CHANGELIST, {"action": "discard", "_selected_action": [dead.pk, alive.pk]}, follow=True
    )
    assert b"1 dead letter(s) discarded; 1 skipped (not dead letters)" in answer.content
    assert list(OutboxMessage.objects.values_list("key", flat=True)) == ["other"]


def test_send_again_skips_rows_that_are_not_dead(broker: Broker) -> None:
    row = OutboxMessage.objects.create(key="alive", task="tests.receipt")
    assert delivery.send_again([row.pk]) == 0


def test_the_gauge_counts_dead_letters(broker: Broker) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from idempotency_django.outbox import prometheus

    registry = CollectorRegistry()
    prometheus.register(registry)
    _row()
    _exhaust(broker)
    text = generate_latest(registry).decode()
    assert "idempotency_outbox_dead 1.0" in text
    assert "idempotency_outbox_pending 0.0" in text


@pytest.mark.parametrize("value", [0, -1, 2.5, "20", True])
def test_check_e110_refuses_a_bad_cap(value: object, settings: Any) -> None:
    assert [m.id for m in check_max_attempts(value)] == ["idempotency_django.E110"]
    settings.IDEMPOTENCY_OUTBOX_MAX_ATTEMPTS = value
    with pytest.raises(SystemCheckError, match="E110"):
        call_command("check")


@pytest.mark.parametrize("value", [None, 1, 20])
def test_check_e110_accepts_a_positive_cap_or_none(value: object) -> None:
    assert check_max_attempts(value) == []
