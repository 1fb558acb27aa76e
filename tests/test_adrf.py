"""``IdempotentMixin`` on adrf (async DRF) views, viewsets and generic views.

Runs on SQLite and, in the PostgreSQL pass, on PostgreSQL (the race too).
The views are in ``tests/testapp/adrf_api.py``; DRF's TokenAuthentication is on.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from rest_framework.authtoken.models import Token

from idempotency_django.exceptions import PROBLEM_BASE
from idempotency_django.models import IdempotencyEntry
from tests.helpers import charges, new_key, problem, race

pytestmark = [pytest.mark.faces, pytest.mark.versions, pytest.mark.django_db(transaction=True)]
Status = IdempotencyEntry.Status

ASYNC_VIEWS = pytest.mark.parametrize(
    "path", ["/adrf/apiview/", "/adrf/viewset/", "/adrf/generic/", "/adrf/sync-apiview/"]
)


def send(path: str, key: str | None, body: dict[str, Any] | None = None, token: str = "") -> Any:
    headers = {"Idempotency-Key": key} if key is not None else {}
    if token:
        headers["Authorization"] = f"Token {token}"
    payload = json.dumps(body if body is not None else {"amount": 100})
    client = Client(raise_request_exception=False)
    return client.post(path, payload, content_type="application/json", headers=headers)


def assert_replay(first: Any, retry: Any) -> None:
    assert retry["Idempotent-Replayed"] == "true"
    assert (retry.status_code, retry.content) == (first.status_code, first.content)
    assert retry.get("Location") == first.get("Location")


@pytest.fixture
def tokens() -> tuple[str, str]:
    alice = User.objects.create_user("alice")
    bob = User.objects.create_user("bob")
    return Token.objects.create(user=alice).key, Token.objects.create(user=bob).key


@ASYNC_VIEWS
def test_retry_is_a_byte_identical_replay(path: str) -> None:
    key = new_key()
    first = send(path, key)
    assert first.status_code == 201, first.content
    assert_replay(first, send(path, key))
    assert charges(key) == 1


@ASYNC_VIEWS
def test_another_body_with_the_key_is_422(path: str) -> None:
    key = new_key()
    send(path, key, {"amount": 100})
    response = send(path, key, {"amount": 101})
    assert response.status_code == 422
    assert problem(response)["type"] == PROBLEM_BASE + "key-reused"
    assert charges(key) == 1


@ASYNC_VIEWS
def test_in_flight_duplicate_is_409(path: str) -> None:
    key = new_key()
    send(path, key)
    IdempotencyEntry.objects.filter(key=key).update(
        status=Status.IN_PROGRESS, locked_until=timezone.now() + timedelta(seconds=60)
    )
    response = send(path, key)
    assert response.status_code == 409
    assert int(response["Retry-After"]) >= 1


@ASYNC_VIEWS
def test_two_tokens_with_one_key_never_share_an_answer(path: str, tokens: tuple[str, str]) -> None:
    alice, bob = tokens
    key = new_key()
    first_alice = send(path, key, token=alice)
    first_bob = send(path, key, token=bob)
    assert "Idempotent-Replayed" not in first_bob
    assert charges(key) == 2
    assert_replay(first_alice, send(path, key, token=alice))
    assert_replay(first_bob, send(path, key, token=bob))
    assert charges(key) == 2


@ASYNC_VIEWS
def test_401_is_never_stored(path: str, tokens: tuple[str, str]) -> None:
    key = new_key()
    assert send(path, key, token="not-a-token").status_code == 401
    assert not IdempotencyEntry.objects.filter(key=key).exists()
    assert send(path, key, token=tokens[0]).status_code == 201
    assert charges(key) == 1


@pytest.mark.parametrize("path", ["/adrf/apiview/", "/adrf/viewset/"])
def test_an_exception_rolls_back_and_frees_the_key(path: str) -> None:
    key = new_key()
    assert send(path, key, {"amount": 1, "fail": True}).status_code == 500
    assert charges(key) == 0
    assert not IdempotencyEntry.objects.filter(key=key).exists()


@pytest.mark.parametrize("path", ["/adrf/apiview/", "/adrf/viewset/"])
def test_a_final_4xx_is_stored_and_a_5xx_is_not(path: str) -> None:
    key = new_key()
    declined = send(path, key, {"amount": 1, "status": 402})
    assert_replay(declined, send(path, key, {"amount": 1, "status": 402}))
    other = new_key()
    assert send(path, other, {"amount": 1, "status": 503}).status_code == 503
    assert charges(other) == 0


def test_safe_method_of_an_async_viewset_passes_through() -> None:
    assert Client().get("/adrf/viewset/").status_code == 200


@pytest.mark.requires_postgres
@pytest.mark.parametrize("path", ["/adrf/apiview/", "/adrf/viewset/", "/adrf/generic/"])
def test_sixteen_racing_retries_execute_once(path: str) -> None:
    for trial in range(10):
        key = f"adrf-{trial}-{new_key()}"

        def one(_index: int, key: str = key) -> Any:
            return send(path, key)

        responses = race(16, one)
        assert not [r for r in responses if isinstance(r, BaseException)], responses
        originals = [
            r for r in responses if r.status_code == 201 and "Idempotent-Replayed" not in r
        ]
        assert len(originals) == 1, [r.status_code for r in responses]
        for response in responses:
            if response is not originals[0] and response.status_code != 409:
                assert_replay(originals[0], response)
        assert charges(key) == 1
