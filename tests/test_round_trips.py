"""The claim carries its transaction's BEGIN, the record its COMMIT: round trips counted.

Where the library's statements go out as simple queries (Django's client-side
binding, prepared statements off: e.g. behind PgBouncer in transaction mode),
the claim's query starts with the transaction's ``BEGIN`` and the read-only
claim's record ends with its ``COMMIT``: a first execution costs the view's own
statements plus two round trips. Counted at the wire with libpq's trace of the
messages the client sends (a ``Query`` or a ``Sync`` each ends a round trip),
not with timings.

Both texts go through Django's cursor: query capture and ``execute_wrapper()``
hooks see them. The safety of carrying the COMMIT is proved here too: a record
that meets a row already there (a writer that took no lock) must not commit
the view's writes, and ``on_commit`` hooks run once the COMMIT has happened.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from django.db import OperationalError, connection, transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import path

from idempotency_django import idempotent
from idempotency_django._storage.secret import server_secret
from idempotency_django._storage.store import readonly
from idempotency_django.models import IdempotencyEntry
from tests.helpers import charges, new_key, post
from tests.lock_helpers import dsn, lock_id, query
from tests.testapp.models import Charge

pytestmark = [pytest.mark.requires_postgres, pytest.mark.django_db(transaction=True)]
TABLE = IdempotencyEntry._meta.db_table
hooks: list[int] = []


@idempotent
def charge_with_hook(request: HttpRequest) -> HttpResponse:
    key = request.idempotency.key  # type: ignore[attr-defined]
    Charge.objects.create(reference=key, amount=100)
    # Committed by then: another connection sees the charge.
    transaction.on_commit(lambda: hooks.append(_committed(key)))
    return JsonResponse({"ok": True}, status=201)


def _committed(key: str) -> int:
    return int(query("SELECT count(*) FROM testapp_charge WHERE reference = %s", (key,))[0][0])


@idempotent
def charge_then_iterate_for_update(request: HttpRequest) -> HttpResponse:
    """A server-side cursor (iterator()) with FOR UPDATE, after the carried BEGIN: Django
    declares it WITH HOLD if psycopg still says autocommit, and FOR UPDATE refuses that."""
    key = request.idempotency.key  # type: ignore[attr-defined]
    Charge.objects.create(reference=key, amount=100)
    locked = list(Charge.objects.select_for_update().filter(reference=key).iterator(2))
    return JsonResponse({"locked": len(locked)}, status=201)


@idempotent
def charge_twice_deferred(request: HttpRequest) -> HttpResponse:
    """Breaks a DEFERRABLE unique constraint of the view's own: it fails at COMMIT."""
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO deferred_probe (k) VALUES ('x'), ('x')")
    return JsonResponse({}, status=201)


urlpatterns = [
    path("hooked/", charge_with_hook),
    path("iterate/", charge_then_iterate_for_update),
    path("deferred/", charge_twice_deferred),
]


@pytest.fixture(
    params=[("read-only", False), ("read-only", True), ("inserting", False), ("inserting", True)],
    ids=["read-only", "read-only-prepared", "inserting", "inserting-prepared"],
)
def claim_form(request: pytest.FixtureRequest, settings: Any) -> Iterator[str]:
    form, prepared = request.param
    settings.IDEMPOTENCY_PREPARED_STATEMENTS = prepared
    enabled, readonly.ENABLED = readonly.ENABLED, form == "read-only"
    server_secret()  # read once per process, never per request
    yield str(form)
    readonly.ENABLED = enabled


def round_trips(send: Callable[[], Any]) -> list[str]:
    """What ``send()`` made its connection send: one line per round trip.

    The trace starts at the request's first statement, on the connection the
    request holds then (a pool hands each request any of its connections); with
    prepared statements off, the ``BEGIN`` travels in that statement.
    """
    fd, name = tempfile.mkstemp()
    traced: list[Any] = []

    def start(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if not traced:
            traced.append(connection.connection.pgconn)
            traced[0].trace(fd)
            traced[0].set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        return execute(sql, params, many, context)

    try:
        with connection.execute_wrapper(start):
            send()
        traced[0].untrace()
        with open(name) as trace_file:
            lines = trace_file.read().splitlines()
    finally:
        os.close(fd)
        os.unlink(name)
    return _grouped([line for line in lines if line.startswith("F\t")])


def _grouped(sent: list[str]) -> list[str]:
    """The client's messages, one string per round trip: each ends at a Query or a Sync.

    A simple query is one ``Query`` message; a pipeline (prepared statements, or
    server-side binding) is ``Parse``/``Bind``/``Execute`` messages, then one ``Sync``.
    """
    trips, pending = [], []
    for line in sent:
        pending.append(line)
        if "\tQuery\t" in line or "\tSync" in line:
            trips.append("\n".join(pending))
            pending = []
    return trips


def test_a_first_execution_is_the_views_statements_plus_two_round_trips(
    claim_form: str,
) -> None:
    client = Client()
    post(client, "/charges/", new_key())  # the connection is open and warm
    responses: list[Any] = []
    with CaptureQueriesContext(connection) as captured:
        sent = round_trips(lambda: responses.append(post(client, "/charges/", new_key())))
    assert responses[0].status_code == 201
    claim, view = sent[0], sent[1]
    assert "BEGIN" in claim
    # A prepared claim, once parsed, is sent by name (Bind "_pg3_…"), not by its text.
    assert "advisory_xact_lock" in claim or "\tBind\t" in claim
    assert "testapp_charge" in view
    # Django's cursor saw both, in one query (client-side binding) or in two (a pipeline);
    # a bare "BEGIN" is Django's own log of atomic() turning autocommit off (no message).
    sql = [q["sql"] for q in captured.captured_queries if q["sql"] != "BEGIN"]
    assert sql[0].startswith(("BEGIN ", "BEGIN;"))
    assert any(word in " ".join(sql[:2]) for word in ("advisory_xact_lock", readonly.FUNCTION)), sql
    if "WITH lk" in claim:
        # The inserting claim: asked for, or a pooled session handed back at another
        # level (an earlier test's): usable() judged the session's own.
        assert claim_form == "inserting" or connection.connection.isolation_level is not None
        claim_form = "inserting"
    # Was 5 (4 with the inserting claim): BEGIN and COMMIT each a round trip of their own.
    assert len(sent) == 3, sent
    assert "COMMIT" in sent[2]
    # The record (a prepared one is sent by name, Bind "_pg3_…"): Django's cursor saw it,
    # and the COMMIT (in the same text, or next in the pipeline).
    record = next(s for s in reversed(sql) if TABLE in s)
    assert record.startswith("INSERT INTO" if claim_form == "read-only" else "WITH updated")
    assert record.endswith("; COMMIT") or sql[sql.index(record) + 1] == "COMMIT"


@pytest.mark.parametrize("prepared", [False, True], ids=["unprepared", "prepared"])
def test_a_lease_first_execution_carries_begin_with_its_row_lock_and_commit_with_its_record(
    settings: Any, prepared: bool
) -> None:
    """ "lease": the claim commits alone (one round trip), then the row lock carries the
    business transaction's BEGIN and the record its COMMIT: four round trips (was six)."""
    settings.IDEMPOTENCY_PROTOCOL = "lease"
    settings.IDEMPOTENCY_PREPARED_STATEMENTS = prepared
    server_secret()
    client = Client()
    post(client, "/charges/", new_key())  # the connection is open and warm
    responses: list[Any] = []
    sent = round_trips(lambda: responses.append(post(client, "/charges/", new_key())))
    assert responses[0].status_code == 201
    assert len(sent) == 4, sent
    claim, lock, view, record = sent
    assert "INSERT" in claim
    assert "COMMIT" not in claim
    assert "BEGIN" in lock
    assert "FOR UPDATE" in lock
    assert "testapp_charge" in view
    assert "UPDATE" in record
    assert "COMMIT" in record


@pytest.mark.urls(__name__)
def test_on_commit_hooks_run_after_the_carried_commit(claim_form: str) -> None:
    hooks.clear()
    key = new_key()
    response = post(Client(), "/hooked/", key)
    assert response.status_code == 201
    assert hooks == [1]
    assert charges(key) == 1


def test_a_record_meeting_a_row_already_there_commits_nothing(claim_form: str) -> None:
    """A writer that took no lock inserted the key meanwhile: 409, the view's charge rolled back."""
    if claim_form != "read-only":
        pytest.skip("the inserting claim's row is the key's from the start")
    key = new_key()

    forms: list[bool] = []

    def intruder(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if not forms:
            forms.append("WITH lk" not in sql)  # the claim: read-only, or inserting
        if sql.startswith(f'INSERT INTO "{TABLE}"'):
            with psycopg.connect(dsn(), autocommit=True, prepare_threshold=None) as other:
                other.execute(
                    f"INSERT INTO {TABLE} (tenant, key, fingerprint, status, owner, response_headers, "
                    "locked_until, created_at, expires_at) VALUES ('', %s, '', 'in_progress', "
                    "gen_random_uuid(), '{}', now() + interval '1 minute', now(), "
                    "now() + interval '1 day')",
                    (key,),
                )
        return execute(sql, params, many, context)

    with connection.execute_wrapper(intruder):
        response = post(Client(raise_request_exception=False), "/charges/", key)
    if not forms[0]:
        pytest.skip("a pooled session handed back at another isolation level: inserting claim")
    assert response.status_code == 409, response.content
    assert charges(key) == 0
    assert _committed(key) == 0


def test_a_record_that_finds_its_claim_gone_commits_nothing(claim_form: str) -> None:
    """The inserting claim's record is an UPDATE fenced on the owner: one that finds no row
    (the claim lost) must fail, not succeed with no row and let its carried COMMIT run."""
    if claim_form != "inserting":
        pytest.skip("the read-only claim's record inserts: a row already there is the case above")
    key = new_key()

    def thief(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if "UPDATE" in sql and TABLE in sql and "response_status" in sql:
            # On the request's own connection, inside its transaction: the row's owner changes.
            with connection.cursor() as cursor:
                cursor.execute(
                    f"UPDATE {TABLE} SET owner = gen_random_uuid() WHERE key = %s", [key]
                )
        return execute(sql, params, many, context)

    with connection.execute_wrapper(thief):
        response = post(Client(raise_request_exception=False), "/charges/", key)
    assert response.status_code == 500
    assert _committed(key) == 0
    assert not query(f"SELECT 1 FROM {TABLE} WHERE key = %s", (key,))


def test_a_transaction_begun_by_hand_is_left_to_its_owner(claim_form: str) -> None:
    """``set_autocommit(False)`` before the view: no BEGIN carried, psycopg left as it was."""
    key = new_key()
    connection.set_autocommit(False)
    try:
        with CaptureQueriesContext(connection) as captured:
            response = post(Client(), "/charges/", key)
        assert response.status_code == 201
        assert connection.connection.autocommit is False  # still the owner's transaction
        assert not any(q["sql"].startswith("BEGIN ") for q in captured.captured_queries)
        assert not any(q["sql"].endswith("; COMMIT") for q in captured.captured_queries)
        connection.rollback()  # the owner's decision: nothing of it stays
    finally:
        connection.set_autocommit(True)
    assert charges(key) == 0


def test_a_409_is_two_round_trips(claim_form: str) -> None:
    """The claim (with its BEGIN) meets the holder's lock, and its transaction ends. The
    read-only claim wrote nothing, so it commits: a ROLLBACK would make psycopg deallocate
    every prepared statement (DEALLOCATE ALL, a third round trip) and parse each again."""
    key = new_key()
    with psycopg.connect(dsn(), autocommit=False) as holder:
        holder.execute("SELECT pg_advisory_xact_lock(%s)", [lock_id(key)])
        client = Client(raise_request_exception=False)
        post(client, "/charges/", new_key())  # the connection is open and warm
        responses: list[Any] = []
        sent = round_trips(lambda: responses.append(post(client, "/charges/", key)))
    assert responses[0].status_code == 409
    assert len(sent) == 2, sent


def test_a_409_keeps_the_prepared_statements(settings: Any) -> None:
    """After a 409, the next claim is sent by name (Bind), not parsed again (Parse)."""
    settings.IDEMPOTENCY_PREPARED_STATEMENTS = True
    server_secret()
    client = Client(raise_request_exception=False)
    post(client, "/charges/", new_key())  # the claim and the record are prepared
    key = new_key()
    with psycopg.connect(dsn(), autocommit=False) as holder:
        holder.execute("SELECT pg_advisory_xact_lock(%s)", [lock_id(key)])
        assert post(client, "/charges/", key).status_code == 409
    sent = round_trips(lambda: post(client, "/charges/", new_key()))
    assert readonly.FUNCTION not in sent[0]  # not parsed again: bound by its name
    assert "\tBind\t" in sent[0]


@pytest.mark.urls(__name__)
def test_a_server_side_cursor_after_the_carried_begin_is_not_held(claim_form: str) -> None:
    """psycopg is back to autocommit off once the BEGIN is in: no WITH HOLD cursor."""
    key = new_key()
    response = post(Client(), "/iterate/", key)
    assert response.status_code == 201, response.content
    assert response.json() == {"locked": 1}
    assert charges(key) == 1


@pytest.mark.urls(__name__)
def test_a_deferred_constraint_failing_at_the_carried_commit_is_a_500(claim_form: str) -> None:
    """Not a 409: the unique violation is the view's own table's, not our entry's."""
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE deferred_probe (k text UNIQUE DEFERRABLE INITIALLY DEFERRED)")
    try:
        key = new_key()
        response = post(Client(raise_request_exception=False), "/deferred/", key)
        assert response.status_code == 500
        assert not query(f"SELECT 1 FROM {TABLE} WHERE key = %s", (key,))
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE deferred_probe")


def test_a_refused_claim_whose_commit_fails_is_still_a_409(
    claim_form: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refused read-only claim wrote nothing: a failed COMMIT does not turn it into 503."""
    if claim_form != "read-only":
        pytest.skip("the inserting claim's refusal rolls back")
    key = new_key()
    client = Client(raise_request_exception=False)
    post(client, "/charges/", new_key())  # the connection is open

    def commit() -> None:
        raise OperationalError("the connection dropped at COMMIT")

    with psycopg.connect(dsn(), autocommit=False) as holder:
        holder.execute("SELECT pg_advisory_xact_lock(%s)", [lock_id(key)])
        monkeypatch.setattr(connection, "commit", commit)
        response = post(client, "/charges/", key)
        monkeypatch.undo()
    assert response.status_code == 409
