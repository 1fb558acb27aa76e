"""An execution whose effect outside the database nobody knows is surfaced: a claim taken
over (its holder's lease passed), reclaimed by the purge or released by an operator
sends ``outcome_uncertain`` and logs a warning naming it."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from idempotency_django import purge, signals
from idempotency_django.consumers import consume
from tests.factories import IdempotencyEntryFactory
from tests.testapp.models import Charge

pytestmark = pytest.mark.django_db


@pytest.fixture
def uncertain() -> Iterator[list[dict[str, Any]]]:
    seen: list[dict[str, Any]] = []

    def receiver(sender: str, **kwargs: Any) -> None:
        seen.append({"sender": sender, **kwargs})

    signals.outcome_uncertain.connect(receiver)
    yield seen
    signals.outcome_uncertain.disconnect(receiver)


def test_a_claim_taken_over_after_its_lease_is_uncertain(
    uncertain: list[dict[str, Any]],
    caplog: pytest.LogCaptureFixture,
    django_capture_on_commit_callbacks: Any,
) -> None:
    # A consumer died holding "m1" (its lease passed): the next delivery takes it over.
    IdempotencyEntryFactory.create(key="consumer\x1fm1", abandoned=True)
    with (
        caplog.at_level(logging.WARNING, "idempotency_django"),
        django_capture_on_commit_callbacks(execute=True),
    ):
        verdict = consume("m1", lambda: Charge.objects.create(reference="m1", amount=1).pk)
    assert verdict.outcome == "executed"
    digest = signals.key_digest("", "consumer\x1fm1")
    assert [(u["how"], u["count"], u["key_digest"]) for u in uncertain] == [("takeover", 1, digest)]
    assert f"uncertain outcome (takeover) on 'default': 1 execution(s) [key {digest}]" in (
        caplog.text
    )


def test_claims_the_purge_reclaims_are_uncertain(uncertain: list[dict[str, Any]]) -> None:
    IdempotencyEntryFactory.create_batch(2, abandoned=True)
    IdempotencyEntryFactory.create(in_progress=True)  # still within its lease: not touched
    purge.purge()
    assert [(u["how"], u["count"], u["key_digest"]) for u in uncertain] == [("purge", 2, None)]


def test_claims_an_operator_releases_are_uncertain(uncertain: list[dict[str, Any]]) -> None:
    stuck = IdempotencyEntryFactory.create(abandoned=True)
    assert purge.release([stuck.pk]) == 1
    assert [(u["how"], u["count"]) for u in uncertain] == [("admin", 1)]


def test_nothing_reclaimed_is_nothing_uncertain(uncertain: list[dict[str, Any]]) -> None:
    IdempotencyEntryFactory.create(in_progress=True)
    purge.purge()
    assert uncertain == []
