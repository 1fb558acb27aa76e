"""An outbox dead letter whose last publish timed out waiting for the broker's confirm may
have been taken by the broker: it is signalled uncertain, and "send again" says it may be
a second delivery (the consumer's key makes that a replay)."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client, TestCase
from django.utils import timezone

from idempotency_django import signals
from idempotency_django.outbox import delivery
from idempotency_django.outbox.models import OutboxMessage

pytestmark = pytest.mark.django_db
CHANGELIST = "/admin/idempotency_outbox/outboxmessage/"


@pytest.fixture
def failing(monkeypatch: pytest.MonkeyPatch, settings: Any) -> list[BaseException]:
    """The publishes' errors, in order (the last repeats)."""
    settings.IDEMPOTENCY_OUTBOX_MAX_ATTEMPTS = 2
    settings.ROOT_URLCONF = "tests.testapp.outbox_views"
    errors: list[BaseException] = []

    def publish(row: OutboxMessage, timeout: float | None = None) -> None:
        raise errors[0] if len(errors) == 1 else errors.pop(0)

    monkeypatch.setattr(delivery, "publish", publish)
    return errors


@pytest.fixture
def dead_letters() -> Any:
    seen: list[dict[str, Any]] = []

    def receiver(sender: str, **kwargs: Any) -> None:
        seen.append({"sender": sender, **kwargs})

    signals.dead_lettered.connect(receiver)
    yield seen
    signals.dead_lettered.disconnect(receiver)


def _dead_row(key: str) -> OutboxMessage:
    due = timezone.now() - timedelta(minutes=1)
    row = OutboxMessage.objects.create(key=key, task="tests.receipt", next_attempt_at=due)
    for _ in range(2):
        with TestCase.captureOnCommitCallbacks(execute=True):
            delivery.relay(ignore_schedule=True)
    row.refresh_from_db()
    assert row.dead_at is not None
    return row


def test_a_dead_letter_whose_last_confirm_timed_out_is_signalled_uncertain(
    failing: list[BaseException],
    dead_letters: list[dict[str, Any]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    failing.extend([ConnectionRefusedError("refused"), TimeoutError("confirm timed out")])
    with caplog.at_level(logging.WARNING, "idempotency_django"):
        row = _dead_row("order-8")
    assert [(d["sender"], d["uncertain"]) for d in dead_letters] == [("outbox", True)]
    assert row.uncertain is True
    assert "uncertain outcome (dead_letter)" in caplog.text


def test_a_dead_letter_the_broker_refused_is_certain(
    failing: list[BaseException], dead_letters: list[dict[str, Any]]
) -> None:
    failing.extend([TimeoutError("confirm timed out"), ConnectionRefusedError("refused")])
    row = _dead_row("order-9")
    assert [(d["sender"], d["uncertain"]) for d in dead_letters] == [("outbox", False)]
    assert row.uncertain is False


def test_send_again_says_an_uncertain_dead_letter_may_be_a_second_delivery(
    failing: list[BaseException], admin_client: Client
) -> None:
    failing.append(TimeoutError("confirm timed out"))
    row = _dead_row("order-10")
    answer = admin_client.post(
        CHANGELIST, {"action": "send_again", "_selected_action": [row.pk]}, follow=True
    )
    page = answer.content.decode()
    assert "1 dead letter(s) sent again" in page
    assert "1 of them may be a second delivery" in page
    row.refresh_from_db()
    assert (row.dead_at, row.uncertain) == (None, False)
