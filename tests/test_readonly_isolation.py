"""The read-only claim runs only where the session really is READ COMMITTED.

A pooled connection keeps the isolation level it was last given, whatever the
alias's OPTIONS say now: the claim must read the session's own level (psycopg's),
or it takes its snapshot too early under REPEATABLE READ and a duplicate that
should replay runs the view and fails at the final INSERT.
"""

from __future__ import annotations

import psycopg
import pytest
from django.db import connection

from idempotency_django.store import readonly

pytestmark = [pytest.mark.requires_postgres, pytest.mark.django_db(transaction=True)]


def test_a_session_left_at_repeatable_read_takes_the_inserting_claim() -> None:
    connection.ensure_connection()
    raw = connection.connection
    assert readonly.usable(connection, own=True)
    raw.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ  # as a pool hands it back
    try:
        # Django's own attribute still says what OPTIONS said.
        assert connection.isolation_level == psycopg.IsolationLevel.READ_COMMITTED  # type: ignore[attr-defined]
        assert not readonly.usable(connection, own=True)
    finally:
        raw.isolation_level = None
    assert readonly.usable(connection, own=True)
