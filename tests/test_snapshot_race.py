"""The read-only claim's one subtle rule: look the entry up *after* the lock is granted.

A duplicate that queues on the key's advisory lock (``wait``) while the holder
runs must, once the holder commits and the lock is granted, see the holder's
answer and replay it. The lookup therefore has to be a statement after the one
that took the lock: at READ COMMITTED each statement reads on a snapshot taken
when it starts, so a single statement that locks and reads sees the key as it
was before the holder committed, and runs the view a second time.

Deterministic: the holder is a transaction of the test that takes the key's
lock and writes a finished entry, the duplicate is seen waiting on that lock
in ``pg_locks``, and only then does the holder commit.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection

from idempotency_django._storage import seal
from idempotency_django._storage.store import pg, readonly, sql
from idempotency_django.models import IdempotencyEntry
from tests.helpers import charges, new_key
from tests.lock_helpers import Background, dsn, lock_id, query, send, wait_for

pytestmark = [pytest.mark.requires_postgres, pytest.mark.django_db(transaction=True)]
TABLE = IdempotencyEntry._meta.db_table
COLUMNS = (
    "fingerprint, status, response_status, response_reason, response_headers, response_body, "
    "locked_until, created_at, expires_at"
)
COPIED = COLUMNS.replace("response_headers, response_body", "%s::jsonb, %s")


@pytest.fixture
def read_only_claim() -> Iterator[None]:
    enabled, readonly.ENABLED = readonly.ENABLED, True
    yield
    readonly.ENABLED = enabled


def queued_on_advisory_lock() -> bool:
    # This database's waiters only: make test's other lanes have their own on this server.
    return bool(
        query(
            "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND database = "
            "(SELECT oid FROM pg_database WHERE datname = current_database())"
        )
    )


def race(key: str, body: dict[str, Any]) -> Any:
    """A duplicate queued on ``key``'s lock while a holder commits its answer; its response."""
    model = new_key()  # a real first execution of the same request: its entry is copied
    assert send(model, body).status_code == 201
    # Sealed afresh for ``key``: an answer copied as it is onto another key does not open.
    entry = IdempotencyEntry.objects.get(key=model)
    answer = seal.answer_of("default", entry)
    assert answer is not None
    headers, sealed = seal.row_columns("default", entry.tenant, key, answer)
    with psycopg.connect(dsn()) as holder:
        holder.execute("SELECT pg_advisory_xact_lock(%s::bigint)", [lock_id(key)])
        holder.execute(
            f"INSERT INTO {TABLE} (tenant, key, owner, {COLUMNS}) "
            f"SELECT tenant, %s, gen_random_uuid(), {COPIED} FROM {TABLE} WHERE key = %s",
            [key, headers, sealed, model],
        )
        duplicate = Background(key, body, {"wait": 5.0})
        wait_for(queued_on_advisory_lock, what="the duplicate queued on the key's lock")
        holder.commit()
    return duplicate.join()


@pytest.mark.parametrize("prepared", [True, False], ids=["function", "two-statements"])
def test_a_duplicate_granted_the_lock_replays_what_the_holder_committed(
    read_only_claim: None, settings: Any, prepared: bool
) -> None:
    """Both read-only forms: the migration's function (prepared) and two statements in a query."""
    settings.IDEMPOTENCY_PREPARED_STATEMENTS = prepared
    key = new_key()
    response = race(key, {"amount": 100, "reference": key})
    assert response.status_code == 201
    assert response["Idempotent-Replayed"] == "true"
    assert charges(key) == 0  # the holder was the test: the view never ran for this key


_TWO_STATEMENTS = readonly.claim_sql


def _one_statement(conn: Any, blocking: bool, bounded: bool) -> str:
    """The wrong form: lock and read in one statement, on a snapshot older than the lock."""
    if not blocking:
        return _TWO_STATEMENTS(conn, blocking, bounded)
    bound = f", {pg.IDLE_BOUND}" if bounded else ""
    return (
        "SELECT set_config('lock_timeout', %s, true); "
        f"SELECT {sql.row_sql(conn)} FROM (SELECT pg_advisory_xact_lock({pg.LOCK_ID}) AS got"
        f"{bound} OFFSET 0) AS lk CROSS JOIN {sql.table(conn)} WHERE {sql.where_key(conn)}"
    )


def test_the_race_tells_the_one_statement_form_apart(
    read_only_claim: None, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    """The test above can fail: with the one-statement claim the duplicate does not replay."""
    settings.IDEMPOTENCY_PREPARED_STATEMENTS = False
    monkeypatch.setattr(readonly, "claim_sql", _one_statement)
    monkeypatch.setattr(sql, "_SQL", {})
    key = new_key()
    response = race(key, {"amount": 100, "reference": key})
    assert connection.vendor == "postgresql"
    # It saw no entry, ran the view, and its INSERT met the holder's row: 409, rolled back.
    assert response.status_code == 409
    assert "Idempotent-Replayed" not in response
    assert charges(key) == 0
