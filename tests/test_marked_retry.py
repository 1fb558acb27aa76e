"""A retry the client marks (``Idempotency-Retry``) is answered by one read in autocommit.

Under "lock" (PostgreSQL's default) a claim opens the view's transaction, so an
unmarked replay costs two round trips. Unmarked requests claim first all the
same: most keys are never retried, so a lookup before every claim would cost
each first execution a round trip. A client that knows it is retrying
(``idempotency_django.client`` does) says so, and a final answer then comes back
from one ``SELECT``, with no transaction around it. Anything else the read finds
(no entry, one in progress, one expired) goes on to the claim, which decides as
it does for any request. Under "lease" the claim itself reads in autocommit
first: the mark is left alone there.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import httpx
import pytest
from django.db import connection, transaction
from django.test import Client, RequestFactory
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from idempotency_django._protocol import core
from idempotency_django._protocol.fingerprint import keyed, request_fingerprint
from idempotency_django._storage.secret import server_secret
from idempotency_django.client import IdempotentTransport, RetryPolicy
from idempotency_django.models import IdempotencyEntry
from tests.factories import IdempotencyEntryFactory
from tests.helpers import charges, new_key, post, problem

pytestmark = pytest.mark.django_db(transaction=True)
MARKED = {"HTTP_IDEMPOTENCY_RETRY": "1"}


@pytest.fixture
def client() -> Client:
    server_secret()  # read once per process: not one of the counted statements
    return Client(raise_request_exception=False)


def _fingerprint(body: Any = None) -> str:
    """The fingerprint ``post(client, "/charges/", key, body)`` carries."""
    payload = json.dumps(body if body is not None else {"amount": 100})
    request = RequestFactory().post("/charges/", payload, content_type="application/json")
    return keyed(request_fingerprint(request)).current


def _forbid(monkeypatch: pytest.MonkeyPatch, name: str, why: str) -> None:
    """Make ``core.<name>`` fail the request (and so the test) if it is called."""

    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(why)

    monkeypatch.setattr(core, name, forbidden)


def _entries_sql(context: CaptureQueriesContext) -> list[str]:
    return [query["sql"] for query in context.captured_queries]


@pytest.mark.requires_postgres
def test_a_marked_retry_of_a_final_answer_is_one_read_and_no_transaction(client: Client) -> None:
    key = new_key()
    first = post(client, "/charges/", key)
    assert first.status_code == 201
    with CaptureQueriesContext(connection) as context:
        again = post(client, "/charges/", key, **MARKED)
    assert again.status_code == 201
    assert again["Idempotent-Replayed"] == "true"
    assert again.content == first.content
    assert charges(key) == 1
    sent = _entries_sql(context)
    assert len(sent) == 1, sent
    assert sent[0].lstrip().upper().startswith("SELECT")
    assert IdempotencyEntry._meta.db_table in sent[0]


@pytest.mark.requires_postgres
def test_a_marked_retry_of_a_final_answer_claims_nothing(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = new_key()
    first = post(client, "/charges/", key)

    _forbid(monkeypatch, "claimed", "a marked retry of a final answer claimed its key")
    again = post(client, "/charges/", key, **MARKED)
    assert (again.status_code, again["Idempotent-Replayed"]) == (201, "true")
    assert again.content == first.content


@pytest.mark.requires_postgres
def test_inside_a_callers_transaction_the_mark_is_left_to_the_claim(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = new_key()
    first = post(client, "/charges/", key)

    _forbid(monkeypatch, "settled", "looked up inside the caller's transaction")
    with transaction.atomic():
        again = post(client, "/charges/", key, **MARKED)
    assert (again.status_code, again["Idempotent-Replayed"]) == (201, "true")
    assert again.content == first.content
    assert charges(key) == 1


@pytest.mark.requires_postgres
def test_a_marked_retry_whose_read_meets_the_database_away_is_a_503(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.db import OperationalError

    from idempotency_django._protocol import execution

    key = new_key()
    assert post(client, "/charges/", key).status_code == 201

    def away(target: Any) -> None:
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(execution, "read", away)
    again = post(client, "/charges/", key, **MARKED)
    assert again.status_code == 503  # translated as a claim's error: retry later
    assert problem(again)["status"] == 503
    assert "Idempotent-Replayed" not in again
    assert charges(key) == 1


def test_under_the_lease_protocol_the_mark_adds_no_lookup(
    client: Client, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.IDEMPOTENCY_PROTOCOL = "lease"  # its claim reads in autocommit first anyway
    key = new_key()
    first = post(client, "/charges/", key)

    _forbid(monkeypatch, "settled", "a lookup before a lease claim: one statement for nothing")
    for extra in (MARKED, {}):
        again = post(client, "/charges/", key, **extra)
        assert (again.status_code, again["Idempotent-Replayed"]) == (201, "true")
        assert again.content == first.content
    fresh = new_key()
    assert "Idempotent-Replayed" not in post(client, "/charges/", fresh, **MARKED)
    assert charges(key) == charges(fresh) == 1


@pytest.mark.requires_postgres
def test_an_unmarked_retry_still_claims_first(client: Client) -> None:
    # On PostgreSQL ("lock") the claim is the transaction's first statement; SQLite's and
    # MySQL's "lease" claims read first anyway.
    key = new_key()
    assert post(client, "/charges/", key).status_code == 201
    with CaptureQueriesContext(connection) as context:
        again = post(client, "/charges/", key)
    assert again["Idempotent-Replayed"] == "true"
    assert any(sql.upper().startswith("BEGIN") for sql in _entries_sql(context))


def test_a_marked_first_attempt_reads_then_runs_once(client: Client) -> None:
    key = new_key()
    response = post(client, "/charges/", key, **MARKED)
    assert response.status_code == 201
    assert "Idempotent-Replayed" not in response
    assert charges(key) == 1
    assert post(client, "/charges/", key, **MARKED)["Idempotent-Replayed"] == "true"
    assert charges(key) == 1


@pytest.mark.requires_postgres
def test_a_marked_retry_with_another_payload_is_422_and_runs_nothing(client: Client) -> None:
    key = new_key()
    assert post(client, "/charges/", key, {"amount": 100}).status_code == 201
    with CaptureQueriesContext(connection) as context:
        reused = post(client, "/charges/", key, {"amount": 999}, **MARKED)
    assert reused.status_code == 422
    assert problem(reused)["status"] == 422
    assert charges(key) == 1
    assert len(_entries_sql(context)) == 1  # refused on the read alone


def test_a_marked_retry_of_an_expired_answer_runs_the_view_again(client: Client) -> None:
    key = new_key()
    IdempotencyEntryFactory(key=key, fingerprint=_fingerprint(), expired=True)
    response = post(client, "/charges/", key, **MARKED)
    assert response.status_code == 201
    assert "Idempotent-Replayed" not in response
    assert charges(key) == 1


@pytest.mark.parametrize("marked", [False, True])
def test_a_marked_retry_of_a_key_in_progress_is_answered_as_unmarked(
    client: Client, settings: Any, marked: bool
) -> None:
    settings.IDEMPOTENCY_PROTOCOL = "lease"  # an in-progress row any database can hold
    key = new_key()
    IdempotencyEntryFactory(
        key=key,
        fingerprint=_fingerprint(),
        in_progress=True,
        locked_until=timezone.now() + timedelta(minutes=5),
    )
    response = post(client, "/charges/", key, **(MARKED if marked else {}))
    assert response.status_code == 409
    assert "Retry-After" in response
    assert charges(key) == 0


def test_the_client_marks_its_retries_and_not_its_first_attempt() -> None:
    sent: list[dict[str, str]] = []
    outcomes: list[int | Exception] = [httpx.ReadTimeout("lost"), 503, 201]

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(dict(request.headers))
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return httpx.Response(outcome)

    policy = RetryPolicy(sleep=lambda seconds: None)
    transport = IdempotentTransport(httpx.MockTransport(handler), policy=policy)
    with httpx.Client(transport=transport) as http:
        assert http.post("http://test/charges/", content=b"{}").status_code == 201
    assert [headers.get("idempotency-retry") for headers in sent] == [None, "1", "2"]
    assert len({headers["idempotency-key"] for headers in sent}) == 1
