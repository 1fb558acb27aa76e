"""SQL statements per path, counted with Django's query capture and asserted.

Counts are deterministic, so they are tests, not timings. Each test names the
statements in order and states the minimum the design allows. The counts differ
per vendor only where PostgreSQL answers "claim or show me the entry" in one
statement (a CTE) and SQLite needs an INSERT then a SELECT.

Django (since 4.2) also lists transaction control in the captured queries:
``BEGIN``, ``COMMIT`` and ``ROLLBACK`` appear below next to the SQL statements
because on PostgreSQL each is a round trip of its own (psycopg sends ``BEGIN``
as a separate message before the transaction's first statement). They are not
SQL statements of ours and are counted apart. ``transaction=True`` so that the
claim commits on its own, as in production.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from idempotency_django import store
from idempotency_django.models import IdempotencyEntry
from tests.factories import IdempotencyEntryFactory
from tests.helpers import charges, new_key, post

pytestmark = pytest.mark.django_db(transaction=True)
Status = IdempotencyEntry.Status
TRANSACTION_CONTROL = frozenset({"BEGIN", "COMMIT", "ROLLBACK"})


@pytest.fixture
def client() -> Client:
    return Client(raise_request_exception=False)


class Statements:
    """What one block sent to the entries' database, each statement named by its role."""

    def __init__(self, context: CaptureQueriesContext) -> None:
        self.context = context

    @property
    def kinds(self) -> list[str]:
        return [kind(query["sql"]) for query in self.context.captured_queries]

    @property
    def sql(self) -> list[str]:
        """The SQL statements alone, transaction control left out."""
        return [k for k in self.kinds if k not in TRANSACTION_CONTROL]

    @property
    def ours(self) -> list[str]:
        """The statements the protocol adds: everything but the view's own."""
        return [k for k in self.sql if k != "view"]


@contextmanager
def statements() -> Iterator[Statements]:
    with CaptureQueriesContext(connection) as context:
        yield Statements(context)


_ENTRIES = IdempotencyEntry._meta.db_table


def kind(sql: str) -> str:
    """Name a captured statement after what it does in the protocol."""
    text = sql.strip()
    if text.upper() in TRANSACTION_CONTROL:
        return text.upper()
    if _ENTRIES not in text:
        return "view"
    verb = text.split(None, 1)[0].upper()
    if verb == "WITH" or verb == "INSERT":
        return "claim"
    if verb == "DELETE":
        return "release"
    if verb == "SELECT":
        return "lock" if "FOR UPDATE" in text.upper() else "read"
    assigned = re.search(r"\bSET\s+\W?(\w+)", text, re.IGNORECASE)
    column = assigned.group(1) if assigned else ""
    # SQLite has no row locks: its "lock" writes locked_until to take the write lock.
    return {"status": "record", "fingerprint": "take_over", "locked_until": "lock"}.get(
        column, "other"
    )


def per_vendor(postgresql: list[str], sqlite: list[str]) -> list[str]:
    return postgresql if connection.vendor == "postgresql" else sqlite


def test_first_execution(client: Client) -> None:
    """Minimum 3 statements of ours, on both vendors: claim, lock, record.

    The claim commits on its own before the view runs, so an in-flight duplicate
    sees it and gets 409 instead of queueing behind the first; the row lock is
    taken inside the view's transaction before the view runs, so no takeover or
    purge can steal the entry from a request that outlives its lease; the answer
    is written in that transaction, so it commits with the business writes or not
    at all. Round trips on PostgreSQL: those 3, plus BEGIN and COMMIT of the view's
    transaction (an unprotected view commits too, inside its autocommit INSERT).
    """
    key = new_key()
    with statements() as sent:
        response = post(client, "/charges/", key)
    assert response.status_code == 201
    claim = per_vendor(["claim"], ["read", "claim"])
    assert sent.kinds == [*claim, "BEGIN", "lock", "view", "record", "COMMIT"]
    assert len(sent.ours) == (3 if connection.vendor == "postgresql" else 4)


def test_replay_from_the_database(client: Client) -> None:
    """Minimum 1 statement on PostgreSQL: the claim's CTE reads the existing entry.

    SQLite needs 1 too, a plain SELECT: there the claim reads before it inserts, so
    that a duplicate doesn't queue behind a running request's write lock.
    """
    key = new_key()
    first = post(client, "/charges/", key)
    with statements() as sent:
        replay = post(client, "/charges/", key)
    assert replay.content == first.content
    assert replay["Idempotent-Replayed"] == "true"
    assert sent.kinds == per_vendor(["claim"], ["read"])


def test_in_flight_duplicate_is_answered_409_from_the_claim_alone(client: Client) -> None:
    """Minimum 1 statement on both: the claim (SQLite: its read) shows the live entry."""
    key = new_key()
    post(client, "/charges/", key)
    IdempotencyEntry.objects.filter(key=key).update(
        status=Status.IN_PROGRESS, locked_until=timezone.now() + timedelta(seconds=60)
    )
    with statements() as sent:
        response = post(client, "/charges/", key)
    assert response.status_code == 409
    assert sent.kinds == per_vendor(["claim"], ["read"])


def test_reuse_with_another_request_is_answered_422_from_the_claim_alone(client: Client) -> None:
    """Minimum 1 statement on both: the fingerprint comes with the entry."""
    key = new_key()
    post(client, "/charges/", key)
    with statements() as sent:
        response = post(client, "/charges/", key, {"amount": 999})
    assert response.status_code == 422
    assert sent.kinds == per_vendor(["claim"], ["read"])


@pytest.mark.parametrize("body", [{"status": 503}, {"raise": True}], ids=["5xx", "exception"])
def test_transient_answer_rolls_back_and_releases(client: Client, body: dict[str, object]) -> None:
    """Minimum 3 statements of ours: claim, lock, release after the ROLLBACK.

    The release has to be its own statement after the rollback: the claim
    committed on its own, so rolling the view back does not remove it.
    """
    key = new_key()
    with statements() as sent:
        response = post(client, "/charges/", key, body)
    assert response.status_code >= 500
    claim = per_vendor(["claim"], ["read", "claim"])
    assert sent.kinds == [*claim, "BEGIN", "lock", "view", "ROLLBACK", "release"]
    assert charges(key) == 0


def test_takeover_of_an_abandoned_claim(client: Client) -> None:
    """Minimum 4 statements of ours on both vendors: claim (or read), take over, lock, record.

    The claim reads the dead entry; the takeover is a separate, fenced UPDATE that
    skips a row still locked by a live transaction. Takeovers only follow a crash.
    """
    key = new_key()
    IdempotencyEntryFactory(key=key, abandoned=True)
    with statements() as sent:
        response = post(client, "/charges/", key)
    assert response.status_code == 201
    claim = per_vendor(["claim"], ["read"])
    assert sent.kinds == [*claim, "take_over", "BEGIN", "lock", "view", "record", "COMMIT"]
    assert charges(key) == 1


def test_unprotected_view_for_comparison(client: Client) -> None:
    """The same view without a key (optional): its one INSERT, nothing else."""
    with statements() as sent:
        response = post(client, "/charges/optional/", None)
    assert response.status_code == 201
    assert sent.kinds == ["view"]


@pytest.mark.requires_postgres
def test_claim_relaxes_its_own_commit_only() -> None:
    """The claim commits asynchronously (README "Performance"); nothing after it does."""
    key = new_key()
    with statements() as sent:
        claimed = _claim(key)
    assert isinstance(claimed, store.Claim)
    assert "synchronous_commit" in sent.context.captured_queries[0]["sql"]
    assert _synchronous_commit() == "on"


@pytest.mark.requires_postgres
def test_claim_inside_a_callers_transaction_keeps_it_synchronous() -> None:
    """A local setting would last until the caller's COMMIT and relax its writes too."""
    with transaction.atomic():
        assert isinstance(_claim(new_key()), store.Claim)
        assert _synchronous_commit() == "on"


def _claim(key: str) -> store.Claim | store.Existing | None:
    return store.claim(
        "default", "", key, "0" * 64, timezone.now(), timedelta(seconds=60), timedelta(hours=1)
    )


def _synchronous_commit() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        row = cursor.fetchone()
    assert row is not None
    return str(row[0])
