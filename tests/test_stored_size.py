"""``IDEMPOTENCY_MAX_STORED_BYTES``: an answer over it is never stored, its view's writes never
commit, and the client gets a problem+json naming the limit; the database's own limit
(MariaDB's ``max_allowed_packet``) meets the same answer instead of a driver error.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import OperationalError, connection
from django.http import HttpRequest, HttpResponse
from django.test import Client, override_settings
from django.urls import path

from idempotency_django import idempotent
from idempotency_django._operations.checks import check_max_stored_bytes, check_mysql_packet
from idempotency_django._protocol import execution
from idempotency_django._storage.store import readonly
from idempotency_django.models import IdempotencyEntry
from tests.helpers import charges, new_key, post, problem, race
from tests.testapp.models import Charge

pytestmark = [pytest.mark.django_db(transaction=True)]
LIMIT = 4096


@idempotent(wait=5)
def sized(request: HttpRequest) -> HttpResponse:
    key = request.idempotency.key  # type: ignore[attr-defined]
    Charge.objects.create(reference=key, amount=1)
    size = int(request.GET.get("size", "10"))
    return HttpResponse(b"x" * size, status=201, content_type="application/octet-stream")


urlpatterns = [path("sized/", sized)]


@pytest.fixture(autouse=True)
def urls() -> Iterator[None]:
    with override_settings(ROOT_URLCONF=__name__, IDEMPOTENCY_MAX_STORED_BYTES=LIMIT):
        yield


@pytest.fixture
def client() -> Client:
    return Client(raise_request_exception=False)


def assert_too_large(response: Any) -> None:
    assert response.status_code == 500
    data = problem(response)
    assert data["type"].endswith("#answer-too-large")
    assert str(LIMIT) in data["detail"] or "max_allowed_packet" in data["detail"]


def test_an_answer_over_the_bound_is_not_stored_and_its_writes_roll_back(client: Client) -> None:
    key = new_key()
    response = post(client, "/sized/?size=5000", key)
    assert_too_large(response)
    assert "IDEMPOTENCY_MAX_STORED_BYTES (4096 bytes)" in problem(response)["detail"]
    assert charges(key) == 0
    assert not IdempotencyEntry.objects.filter(key=key).exists()
    # The key is free: the same request runs afresh (and meets the same bound).
    assert_too_large(post(client, "/sized/?size=5000", key))
    assert charges(key) == 0


def test_an_answer_under_the_bound_is_stored(client: Client) -> None:
    key = new_key()
    assert post(client, "/sized/?size=3000", key).status_code == 201
    assert post(client, "/sized/?size=3000", key)["Idempotent-Replayed"] == "true"
    assert charges(key) == 1


@pytest.mark.requires_server
def test_duplicates_racing_an_oversized_answer_never_commit_an_effect() -> None:
    key = new_key()

    def send(_: int) -> Any:
        return post(Client(raise_request_exception=False), "/sized/?size=5000", key)

    answers = race(6, send)
    for answer in answers:
        assert not isinstance(answer, BaseException), answer
        if answer.status_code == 409:
            continue  # in flight meanwhile: nothing ran for it
        assert_too_large(answer)
    assert charges(key) == 0
    assert not IdempotencyEntry.objects.filter(key=key).exists()


def test_the_connection_dropped_over_the_packet_limit_is_the_same_clear_answer(
    client: Client,
) -> None:
    """The crash: the server refuses the record after the view's work and drops the link."""
    key = new_key()

    def refused(*args: Any) -> bool:
        raise OperationalError(1153, "Got a packet bigger than 'max_allowed_packet' bytes")

    with (
        override_settings(IDEMPOTENCY_MAX_STORED_BYTES=10 * LIMIT),
        pytest.MonkeyPatch.context() as patch,
    ):
        patch.setattr(execution, "record_answer", refused)
        patch.setattr(readonly, "record", refused)
        response = post(client, "/sized/?size=5000", key)
    assert response.status_code == 500
    assert problem(response)["type"].endswith("#answer-too-large")
    assert charges(key) == 0
    assert not IdempotencyEntry.objects.filter(key=key, status="completed").exists()


@pytest.mark.requires_mysql
def test_mariadb_max_allowed_packet_meets_the_same_clear_answer(client: Client) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT @@max_allowed_packet")
        packet = int(cursor.fetchone()[0])
    key = new_key()
    with override_settings(IDEMPOTENCY_MAX_STORED_BYTES=packet + 1024 * 1024):
        response = post(client, f"/sized/?size={packet + 1024}", key)
    assert response.status_code == 500
    # Known race (0.5.0's notes): the server may close the connection before its 1153
    # reaches the client, which then sees 2006 "gone away" and answers a plain 500.
    # Either way nothing commits (asserted below); the clear answer when the error arrives.
    if response["Content-Type"] == "application/problem+json":
        assert problem(response)["type"].endswith("#answer-too-large")
    connection.close()
    assert charges(key) == 0
    assert not IdempotencyEntry.objects.filter(key=key, status="completed").exists()


@pytest.mark.parametrize(
    ("value", "ok"),
    [(1, True), (1024 * 1024, True), (0, False), (-1, False), (True, False), ("1MB", False)],
)
def test_check_e121(value: Any, ok: bool) -> None:
    messages = check_max_stored_bytes(value)
    assert (messages == []) is ok
    assert all(m.id == "idempotency_django.E121" for m in messages)


def test_check_w123_warns_of_a_packet_below_the_bound() -> None:
    assert check_mysql_packet("default", 16 * 1024 * 1024, 1024 * 1024) == []
    (warning,) = check_mysql_packet("default", 1024 * 1024, 1024 * 1024)
    assert warning.id == "idempotency_django.W123"
