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
from django.test import Client, override_settings

from idempotency_django._storage.store import readonly
from tests import gates
from tests.helpers import new_key, post
from tests.lock_helpers import query, wait_for

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


@pytest.mark.requires_postgres
@pytest.mark.django_db(transaction=True)
@override_settings(IDEMPOTENCY_PROTOCOL="lock", IDEMPOTENCY_WAIT=10)
def test_a_server_default_of_repeatable_read_keeps_the_inserting_claim() -> None:
    """The read-only claim needs READ COMMITTED. Django leaves the level to the server
    unless OPTIONS names one, and the server's default may be REPEATABLE READ (ALTER
    DATABASE, a role, PgBouncer's connect_query): then the claim's lookup reads on a
    snapshot taken before the lock was granted, a duplicate that waited for the holder
    finds nothing, runs the view a second time and fails on the answer's INSERT,
    instead of replaying the holder's answer."""
    import threading

    from django.db import connections

    from tests.helpers import charges

    name = connection.settings_dict["NAME"]
    with connection.cursor() as cursor:
        cursor.execute(
            f'ALTER DATABASE "{name}" SET default_transaction_isolation = %s', ["repeatable read"]
        )
    connections.close_all()
    readonly._server_default.clear()  # as in a process started after the ALTER
    key, answers, replayed = new_key(), [], []

    def send() -> None:
        try:
            response = post(Client(), "/charges/", key, {"hold": True})
            answers.append(response.status_code)
            replayed.append(response.headers.get("Idempotent-Replayed"))
        finally:
            connections.close_all()

    try:
        workers = [threading.Thread(target=send) for _ in range(2)]
        with gates.armed(key) as gate:  # the first waits at it, inside its view
            workers[0].start()
            gate.wait_arrival()
            workers[1].start()
            wait_for(_waiting_on_an_advisory_lock, 300, "the duplicate waiting for the holder")
        for worker in workers:
            worker.join(300)
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f'ALTER DATABASE "{name}" RESET default_transaction_isolation')
        connections.close_all()
        readonly._server_default.clear()
    assert charges(key) == 1
    assert answers == [201, 201]
    assert replayed.count("true") == 1


def _waiting_on_an_advisory_lock() -> bool:
    return bool(
        query(
            "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND wait_event = 'advisory'"
        )
    )
