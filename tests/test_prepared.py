"""``IDEMPOTENCY_PREPARED_STATEMENTS``: the hot statements prepared once per connection.

Read from ``pg_prepared_statements`` of the connection that served the requests.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from tests.helpers import new_key, post

pytestmark = [pytest.mark.requires_postgres, pytest.mark.django_db(transaction=True)]


def prepared_here() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


def first_executions(count: int = 2) -> None:
    client = Client()
    for _ in range(count):
        assert post(client, "/charges/", new_key()).status_code == 201


@pytest.fixture(autouse=True)
def lock(settings: Any) -> None:
    settings.IDEMPOTENCY_PROTOCOL = "lock"
    connection.close()  # a fresh connection: nothing prepared yet


def test_on_by_default_the_claim_and_the_answer_are_prepared() -> None:
    first_executions()
    statements = prepared_here()
    assert any("idempotency_django_claim(" in s for s in statements), statements
    assert any(s.lstrip().startswith("INSERT") for s in statements), statements
    assert len(statements) == 2  # the claim, the insert: once each, however many requests


def test_each_prepared_statement_is_still_captured_with_its_values() -> None:
    key = new_key()
    with CaptureQueriesContext(connection) as captured:
        assert post(Client(), "/charges/", key).status_code == 201
    ours = [q["sql"] for q in captured.captured_queries if "idempotency" in q["sql"]]
    assert len(ours) == 2
    assert all(key in sql for sql in ours)  # the claim and the insert name the key, inlined


def test_off_nothing_is_prepared(settings: Any) -> None:
    settings.IDEMPOTENCY_PREPARED_STATEMENTS = False
    first_executions()
    assert prepared_here() == []


def test_default_leaves_a_transaction_pooled_database_alone() -> None:
    """``DISABLE_SERVER_SIDE_CURSORS = True``: how Django says "PgBouncer, transaction mode"."""
    settings_dict = connection.settings_dict
    settings_dict["DISABLE_SERVER_SIDE_CURSORS"] = True
    try:
        first_executions()
        assert prepared_here() == []
    finally:
        settings_dict["DISABLE_SERVER_SIDE_CURSORS"] = False


def test_a_server_side_binding_connection_claims_through_the_function(settings: Any) -> None:
    """``OPTIONS["server_side_binding"]``: one statement per query, so no two-statement query."""
    settings.IDEMPOTENCY_PREPARED_STATEMENTS = False
    options = connection.settings_dict["OPTIONS"]
    connection.settings_dict["OPTIONS"] = {**options, "server_side_binding": True}
    connection.close()
    try:
        key = new_key()
        client = Client()
        assert post(client, "/charges/", key).status_code == 201
        assert post(client, "/charges/", key)["Idempotent-Replayed"] == "true"
    finally:
        connection.settings_dict["OPTIONS"] = options
        connection.close()


def test_before_migration_0004_the_claim_still_works() -> None:
    """Code deployed before ``migrate``: no function yet, the two statements instead."""
    from idempotency_django._storage.store import readonly

    signature = "idempotency_django_claim(bigint, integer, integer, text, text)"
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER FUNCTION {signature} RENAME TO idempotency_django_claim_away")
    readonly._functions.clear()
    try:
        key, client = new_key(), Client()
        assert post(client, "/charges/", key).status_code == 201
        assert post(client, "/charges/", key)["Idempotent-Replayed"] == "true"
    finally:
        with connection.cursor() as cursor:
            cursor.execute(
                "ALTER FUNCTION idempotency_django_claim_away(bigint, integer, integer, text, text)"
                " RENAME TO idempotency_django_claim"
            )
        readonly._functions.clear()
    assert post(Client(), "/charges/", new_key()).status_code == 201
