"""A 409's ``Retry-After``: from the holder's age, bounded by its lease's end and a cap.

Values, not just "at least 1": the holder's age is written into its entry (an
in-progress entry ``age`` seconds old has ``ttl - age`` left), and the answer is
checked against the rule in docs/http.rst.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest
from django.db.models import F
from django.test import Client
from django.utils import timezone

from idempotency_django._protocol.execution import RETRY_AFTER_MAX
from idempotency_django.models import IdempotencyEntry
from tests.helpers import new_key, post
from tests.lock_helpers import dsn, lock_id, send

pytestmark = pytest.mark.django_db(transaction=True)
Status = IdempotencyEntry.Status


def held_for(client: Client, age: float, lease: float, ttl: float = 3600) -> Any:
    """A duplicate's 409 while an in-progress entry ``age`` seconds old holds its key."""
    key = new_key()
    assert post(client, "/charges/", key).status_code == 201
    now = timezone.now()
    IdempotencyEntry.objects.filter(key=key).update(
        status=Status.IN_PROGRESS,
        locked_until=now + timedelta(seconds=lease - age),
        expires_at=now + timedelta(seconds=ttl - age),
        created_at=F("created_at") - timedelta(seconds=age),
    )
    response = post(client, "/charges/", key)
    assert response.status_code == 409
    return response


@pytest.mark.parametrize(
    ("age", "lease", "expected"),
    [
        (0, 60, 1),  # just claimed: ask again soon
        (10, 60, 10),  # running for 10 s: about as long again
        (55, 60, 5),  # its lease ends in 5 s: a dead holder is taken over then
        (200, 600, RETRY_AFTER_MAX),  # never more than the cap
    ],
)
def test_retry_after_follows_the_holders_age_up_to_its_lease(
    client: Client, settings: Any, age: float, lease: float, expected: int
) -> None:
    settings.IDEMPOTENCY_LEASE = timedelta(seconds=lease)
    settings.IDEMPOTENCY_TTL = timedelta(hours=1)
    assert held_for(client, age, lease)["Retry-After"] == str(expected)


def test_against_a_dead_lease_holder_a_client_obeying_it_retries_a_handful_of_times() -> None:
    """The issue's case: 60 s lease, holder dead at once. Ages seen: 1, 2, 4, … until 60."""
    from idempotency_django._protocol.execution import _bounded_retry

    age, retries = 0.0, 0
    while age < 60:
        age += min(_bounded_retry(age), 60 - age)
        retries += 1
    assert retries <= 8


@pytest.mark.requires_postgres
def test_lock_holder_409_after_waiting_says_the_wait() -> None:
    """ "lock": the holder writes no entry; a duplicate that waited 5 s is told 5 s."""
    key = new_key()
    with psycopg.connect(dsn()) as holder:
        holder.execute("SELECT pg_advisory_xact_lock(%s::bigint)", [lock_id(key)])
        response = send(key, protocol="lock", wait=5.0)
        quick = send(key, protocol="lock", wait=0)
        holder.rollback()
    assert (response.status_code, response["Retry-After"]) == (409, "5")
    assert (quick.status_code, quick["Retry-After"]) == (409, "1")
