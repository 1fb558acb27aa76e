"""The read-only claim does not depend on what an earlier request left on its connection.

A persistent connection keeps session characteristics: a reporting view (or a
library) that ran ``SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL
REPEATABLE READ`` leaves every later transaction on that connection at
REPEATABLE READ, whose snapshot is the transaction's first statement's. The
read-only claim needs READ COMMITTED (its lookup must see what the holder
committed while it queued on the lock), so its transaction names its level in
its own ``BEGIN`` instead of trusting the session's default.

Deterministic, as ``test_snapshot_race.py``: the holder is a transaction of the
test, the duplicate is seen queued on the key's lock, and only then does the
holder commit.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection, connections

from idempotency_django._storage import seal
from idempotency_django._storage.store import readonly
from idempotency_django.models import IdempotencyEntry
from tests.helpers import charges, new_key
from tests.lock_helpers import dsn, lock_id, query, send, wait_for

pytestmark = [
    pytest.mark.requires_postgres,
    pytest.mark.django_db(transaction=True),
    # A session setting behind a transaction pooler lands on whichever server
    # connection ran it, and stays there for other clients: not a session of ours.
    pytest.mark.skipif(
        os.environ.get("IDEMPOTENCY_TEST_POOLER") == "pgbouncer",
        reason="session characteristics do not follow a client through PgBouncer",
    ),
]
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


class LeftAtRepeatableRead(threading.Thread):
    """A worker whose persistent connection an earlier request left at REPEATABLE READ."""

    def __init__(self, key: str, body: dict[str, Any]) -> None:
        super().__init__(daemon=True)
        self.key, self.body = key, body
        self.response: Any = None
        self.error: BaseException | None = None
        self.level_after: str | None = None

    def run(self) -> None:
        try:
            with connection.cursor() as cursor:  # "an earlier request" on this connection
                cursor.execute(
                    "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL REPEATABLE READ"
                )
            self.response = send(self.key, self.body, wait=5.0)
            with connection.cursor() as cursor:  # the session's own default is left alone
                cursor.execute("SHOW default_transaction_isolation")
                self.level_after = cursor.fetchone()[0]
        except BaseException as exc:  # reported by result()
            self.error = exc
        finally:
            connections.close_all()

    def result(self) -> Any:
        self.join(60)
        assert not self.is_alive(), "the duplicate is still running"
        assert self.error is None, self.error
        return self.response


def queued_on_advisory_lock() -> bool:
    # This database's waiters only: make test's other lanes have their own on this server.
    return bool(
        query(
            "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND database = "
            "(SELECT oid FROM pg_database WHERE datname = current_database())"
        )
    )


@pytest.mark.parametrize("prepared", [True, False], ids=["prepared", "client-side"])
def test_a_waiting_duplicate_on_a_repeatable_read_session_replays(
    read_only_claim: None, settings: Any, prepared: bool
) -> None:
    settings.IDEMPOTENCY_PREPARED_STATEMENTS = prepared
    key, model = new_key(), new_key()
    body = {"amount": 100, "reference": key}
    assert send(model, body).status_code == 201  # a real answer, copied under ``key`` below
    # Sealed afresh for ``key``: an answer copied as it is onto another key does not open.
    entry = IdempotencyEntry.objects.get(key=model)
    answer = seal.answer_of("default", entry)
    assert answer is not None
    headers, sealed = seal.row_columns("default", entry.tenant, key, answer)
    with psycopg.connect(dsn(), prepare_threshold=None) as holder:
        holder.execute("SELECT pg_advisory_xact_lock(%s::bigint)", [lock_id(key)])
        holder.execute(
            f"INSERT INTO {TABLE} (tenant, key, owner, {COLUMNS}) "
            f"SELECT tenant, %s, gen_random_uuid(), {COPIED} FROM {TABLE} WHERE key = %s",
            [key, headers, sealed, model],
        )
        duplicate = LeftAtRepeatableRead(key, body)
        duplicate.start()
        wait_for(queued_on_advisory_lock, what="the duplicate queued on the key's lock")
        holder.commit()
    response = duplicate.result()
    # Without its own level the duplicate's snapshot predated the holder's commit: it
    # ran the view, and its INSERT met the holder's row (409, rolled back).
    assert response.status_code == 201, response.content
    assert response["Idempotent-Replayed"] == "true"
    assert charges(key) == 0
    assert duplicate.level_after == "repeatable read"


def test_the_claims_transaction_names_its_level_and_leaves_the_connection_as_it_was(
    read_only_claim: None,
) -> None:
    used: list[Any] = []

    def seen(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        used.append((connection.connection, connection.connection.isolation_level))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(seen):
        assert send(new_key()).status_code == 201
    raw, level = used[0]  # the claim's (a pool hands each request any of its connections)
    if level == psycopg.IsolationLevel.REPEATABLE_READ:
        pytest.skip("a pooled connection an earlier test left at REPEATABLE READ")
    assert level == psycopg.IsolationLevel.READ_COMMITTED
    assert raw.isolation_level is None  # restored: the next transaction is the user's
