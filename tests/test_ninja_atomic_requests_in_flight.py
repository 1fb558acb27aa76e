"""``ATOMIC_REQUESTS`` around a Django Ninja *sync* operation: an in-flight duplicate gets
409 with ``Retry-After``, on every database, SQLite included.

Django's request transaction wraps Ninja's dispatcher, which the operation's decorator
cannot opt out of, so the claim runs inside the request's transaction, uncommitted while
the operation runs. SQLite locks the whole database for a writer: the duplicate's claim
meets the first request's lock, waits the connection's ``timeout`` and fails with
"database is locked", which used to be answered 503 ("store unavailable"), the answer for
an unreachable store, instead of the in-flight 409 (found by the conformance matrix's full
product). The duplicate is sent while the first request is held inside its operation (an
event, not a sleep) and must be answered before it is let go.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import OperationalError, connection, connections
from django.http import HttpRequest
from django.test import Client
from django.urls import path
from ninja import NinjaAPI, Schema, Status

from idempotency_django._protocol.execution import translate
from idempotency_django.exceptions import RequestInProgress, StoreUnavailable
from idempotency_django.ninja import idempotent
from tests.helpers import charges, duplicate_while_held, new_key
from tests.testapp.models import Charge

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls(__name__)]
GUARD = 20  # seconds: only for a broken run to end (the answer comes well before)
inside = threading.Event()
let_go = threading.Event()


class ChargeOut(Schema):
    id: int
    amount: int


api = NinjaAPI(urls_namespace="ninja-atomic-requests-in-flight")


@api.post("/charges", auth=None, response={201: ChargeOut})
@idempotent(tenant=lambda request: "one-account")
def charge(request: HttpRequest) -> Status[Charge]:
    created = Charge.objects.create(reference=request.headers["X-Ref"], amount=1)
    inside.set()
    let_go.wait(GUARD)
    return Status(201, created)


urlpatterns = [path("ninja/", api.urls)]


@pytest.fixture
def atomic_requests() -> Iterator[None]:
    inside.clear()
    let_go.clear()
    settings = connection.settings_dict  # shared by every thread's connection
    options = settings["OPTIONS"]
    saved = dict(options)
    settings["ATOMIC_REQUESTS"] = True
    if connection.vendor == "sqlite":
        # SQLite's busy timeout (default 5 s) only delays the duplicate's answer here.
        options["timeout"] = 0.2
    try:
        yield
    finally:
        let_go.set()
        settings["ATOMIC_REQUESTS"] = False
        options.clear()
        options.update(saved)


def send(key: str, answers: list[Any]) -> None:
    try:
        answers.append(
            Client(raise_request_exception=False).post(
                "/ninja/charges",
                json.dumps({}),
                content_type="application/json",
                headers={"Idempotency-Key": key, "X-Ref": key},
            )
        )
    finally:
        connections.close_all()


def test_an_in_flight_duplicate_of_a_sync_operation_is_answered_409(
    atomic_requests: None,
) -> None:
    key = new_key()
    first, duplicate, answered_while_held = duplicate_while_held(send, key, inside, let_go, GUARD)

    assert answered_while_held, "the duplicate queued behind the first request's transaction"
    assert duplicate.status_code == 409, duplicate.content
    assert duplicate["Retry-After"]
    assert first.status_code == 201
    assert charges(key) == 1


def locked_error(tmp_path: Path) -> OperationalError:
    """Django's error for a write meeting another connection's write transaction."""
    holder = sqlite3.connect(tmp_path / "db.sqlite3", isolation_level=None)
    writer = sqlite3.connect(tmp_path / "db.sqlite3", timeout=0, isolation_level=None)
    try:
        holder.execute("CREATE TABLE t (x)")
        holder.execute("BEGIN IMMEDIATE")
        return wrapped(lambda: writer.execute("INSERT INTO t VALUES (1)"))
    finally:
        holder.close()
        writer.close()


def unreachable_error(tmp_path: Path) -> OperationalError:
    """Django's error for a database file that can't be opened."""
    return wrapped(lambda: sqlite3.connect(tmp_path / "missing" / "db.sqlite3"))


def wrapped(statement: Callable[[], object]) -> OperationalError:
    try:
        statement()
    except sqlite3.OperationalError as driver_error:
        error = OperationalError(*driver_error.args)
        error.__cause__ = driver_error  # as Django's DatabaseErrorWrapper raises it
        return error
    raise AssertionError("the statement did not fail")


def test_a_locked_sqlite_database_while_claiming_is_a_busy_key(tmp_path: Path) -> None:
    answer = translate(locked_error(tmp_path), waited=2.0, claiming=True)
    assert isinstance(answer, RequestInProgress)
    assert answer.retry_after == 2


def test_an_unreachable_sqlite_store_while_claiming_is_still_503(tmp_path: Path) -> None:
    assert isinstance(translate(unreachable_error(tmp_path), claiming=True), StoreUnavailable)


def test_a_locked_sqlite_database_outside_a_claim_is_still_503(tmp_path: Path) -> None:
    # E.g. the key status lookup: no key is claimed there, so no key is "in flight".
    assert isinstance(translate(locked_error(tmp_path)), StoreUnavailable)
