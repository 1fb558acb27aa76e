"""``ATOMIC_REQUESTS`` with ``@api_view`` above ``@idempotent``: an in-flight duplicate gets
409 at once, on every server database.

DRF's ``@api_view`` hides ``@idempotent``'s ``_non_atomic_requests``, so the claim
runs inside Django's request-wide transaction, uncommitted while the view runs.
PostgreSQL only *tries* the key's advisory lock; on MariaDB/MySQL a duplicate's
INSERT used to queue on the holder's uncommitted row for ``innodb_lock_wait_timeout``
(50 s), pinning a worker each. The duplicate here is sent while the first request is
held inside its view (an event, not a sleep) and must be answered before it is let go.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection, connections
from django.http import HttpRequest
from django.test import Client
from django.urls import path
from rest_framework.decorators import api_view, authentication_classes, permission_classes
from rest_framework.response import Response

from idempotency_django import idempotent
from tests.conftest import database_vendor
from tests.helpers import charges, duplicate_while_held, new_key
from tests.testapp.models import Charge

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.requires_server,
    pytest.mark.urls(__name__),
]
GUARD = 20  # seconds: only for a broken run to end (the answer comes at once)
inside = threading.Event()
let_go = threading.Event()


@api_view(["POST"])
@authentication_classes([])
@permission_classes([])
@idempotent(protocol="lease")
def charge(request: HttpRequest) -> Response:
    Charge.objects.create(reference=request.headers["X-Ref"], amount=1)
    inside.set()
    let_go.wait(GUARD)
    return Response({"ok": True}, status=201)


urlpatterns = [path("charges/", charge)]


@pytest.fixture
def atomic_requests() -> Iterator[None]:
    inside.clear()
    let_go.clear()
    connection.settings_dict["ATOMIC_REQUESTS"] = True
    try:
        yield
    finally:
        let_go.set()
        connection.settings_dict["ATOMIC_REQUESTS"] = False


# On MariaDB, also MySQL's form of the bounded INSERT (MariaDB speaks both).
FORMS = ["as the server is", *(["MySQL's form"] if database_vendor() == "mysql" else [])]


@pytest.fixture(params=FORMS)
def server_form(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "MySQL's form":
        wrapper = type(connections["default"])
        monkeypatch.setattr(wrapper, "mysql_is_mariadb", False, raising=False)
    return str(request.param)


def send(key: str, answers: list[Any]) -> None:
    try:
        answers.append(
            Client(raise_request_exception=False).post(
                "/charges/",
                json.dumps({"amount": 1}),
                content_type="application/json",
                headers={"Idempotency-Key": key, "X-Ref": key},
            )
        )
    finally:
        connections.close_all()


def test_an_in_flight_duplicate_is_answered_409_while_the_first_is_inside_its_view(
    atomic_requests: None, server_form: str
) -> None:
    key = new_key()
    first, duplicate, answered_while_held = duplicate_while_held(send, key, inside, let_go, GUARD)

    assert answered_while_held, "the duplicate queued behind the first request's transaction"
    assert duplicate.status_code == 409
    assert duplicate["Retry-After"]
    assert first.status_code == 201
    assert charges(key) == 1
