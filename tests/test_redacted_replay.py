"""``redact=`` / ``IDEMPOTENCY_REDACT``: the first caller gets the full answer, every replay the
redacted one, marked ``Idempotent-Redacted: true``; the secret is never stored at all.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
from django.db import OperationalError, connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.test import Client, override_settings
from django.urls import path
from ninja import NinjaAPI, Status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from idempotency_django import idempotent
from idempotency_django._operations.checks import check_redact
from idempotency_django._protocol.redact import MARKER, REDACTED_HEADER, redactor
from idempotency_django._storage.store import carry
from idempotency_django.models import IdempotencyEntry
from idempotency_django.ninja import idempotent as ninja_idempotent
from idempotency_django.rest_framework import IdempotentMixin
from tests.helpers import charges, new_key, post, race, stored_answer
from tests.testapp.models import Charge

pytestmark = [pytest.mark.django_db(transaction=True)]
TOKEN = "tok_live_minted_once"


def minted(request: HttpRequest) -> dict[str, Any]:
    key = request.idempotency.key  # type: ignore[attr-defined]
    charge = Charge.objects.create(reference=key, amount=1)
    return {"id": charge.pk, "token": TOKEN, "card": {"last4": "4242", "secret": "cs_1"}}


def drop_token(response: HttpResponse) -> HttpResponse:
    data = json.loads(response.content)
    data["token"] = "(shown once)"
    return JsonResponse(data, status=response.status_code)


@idempotent(redact=drop_token, wait=5)
def by_callable(request: HttpRequest) -> HttpResponse:
    return JsonResponse(minted(request), status=201)


@idempotent(redact=["token", "card.secret", "items.token"])
def by_paths(request: HttpRequest) -> HttpResponse:
    data = minted(request)
    data["items"] = [{"token": "a"}, {"token": "b"}, {"other": 1}]
    return JsonResponse(data, status=201)


@idempotent
def by_setting(request: HttpRequest) -> HttpResponse:
    return JsonResponse(minted(request), status=201)


@idempotent(redact=["absent"])
def untouched(request: HttpRequest) -> HttpResponse:
    return JsonResponse(minted(request), status=201)


class MintView(IdempotentMixin, APIView):
    authentication_classes = ()
    permission_classes = ()
    idempotency_redact: ClassVar[list[str]] = ["token"]

    def post(self, request: Request) -> Response:
        return Response(minted(request), status=201)


ninja_api = NinjaAPI(urls_namespace="redact-ninja")


@ninja_api.post("/mint", response={201: dict})
@ninja_idempotent(redact=["token"])
def ninja_mint(request: HttpRequest) -> Any:
    return Status(201, minted(request))


urlpatterns = [
    path("callable/", by_callable),
    path("paths/", by_paths),
    path("setting/", by_setting),
    path("untouched/", untouched),
    path("drf/", MintView.as_view()),
    path("ninja/", ninja_api.urls),
]


@pytest.fixture(autouse=True)
def urls() -> Iterator[None]:
    with override_settings(ROOT_URLCONF=__name__):
        yield


@pytest.fixture
def client() -> Client:
    return Client(raise_request_exception=False)


def assert_redacted_replay(client: Client, url: str, key: str, first: Any) -> dict[str, Any]:
    assert first.status_code == 201
    assert REDACTED_HEADER not in first
    assert json.loads(first.content)["token"] == TOKEN  # the first caller: the full answer
    replay = post(client, url, key)
    assert replay.status_code == 201
    assert replay["Idempotent-Replayed"] == "true"
    assert replay[REDACTED_HEADER] == "true"
    assert TOKEN.encode() not in replay.content
    entry = IdempotencyEntry.objects.get(key=key)
    assert TOKEN.encode() not in stored_answer(entry).body  # never stored, even sealed
    assert charges(key) == 1
    data: dict[str, Any] = json.loads(replay.content)
    return data


def test_a_callable_stores_what_it_returns(client: Client) -> None:
    key = new_key()
    data = assert_redacted_replay(client, "/callable/", key, post(client, "/callable/", key))
    assert data["token"] == "(shown once)"
    assert data["card"]["secret"] == "cs_1"


def test_field_paths_blank_named_fields_through_objects_and_lists(client: Client) -> None:
    key = new_key()
    data = assert_redacted_replay(client, "/paths/", key, post(client, "/paths/", key))
    assert data["token"] == MARKER
    assert data["card"] == {"last4": "4242", "secret": MARKER}
    assert data["items"] == [{"token": MARKER}, {"token": MARKER}, {"other": 1}]


@override_settings(IDEMPOTENCY_REDACT="tests.test_redacted_replay.drop_token")
def test_the_setting_names_a_redactor_for_every_view(client: Client) -> None:
    key = new_key()
    data = assert_redacted_replay(client, "/setting/", key, post(client, "/setting/", key))
    assert data["token"] == "(shown once)"


def test_an_answer_the_redactor_leaves_alone_is_replayed_unmarked(client: Client) -> None:
    key = new_key()
    first = post(client, "/untouched/", key)
    replay = post(client, "/untouched/", key)
    assert replay.content == first.content
    assert REDACTED_HEADER not in replay


def test_the_drf_mixin_redacts(client: Client) -> None:
    key = new_key()
    assert_redacted_replay(client, "/drf/", key, post(client, "/drf/", key))


def test_the_ninja_option_redacts(client: Client) -> None:
    key = new_key()
    assert_redacted_replay(client, "/ninja/mint", key, post(client, "/ninja/mint", key))


@pytest.mark.requires_server
def test_duplicates_racing_see_the_full_answer_once_and_the_redacted_one_after() -> None:
    key = new_key()

    def send(_: int) -> Any:
        return post(Client(raise_request_exception=False), "/callable/", key)

    answers = race(6, send)
    assert all(not isinstance(a, BaseException) for a in answers), answers
    full = [a for a in answers if a.status_code == 201 and TOKEN.encode() in a.content]
    assert len(full) == 1
    assert REDACTED_HEADER not in full[0]
    for answer in answers:
        if answer is full[0] or answer.status_code == 409:
            continue
        assert answer.status_code == 201
        assert answer[REDACTED_HEADER] == "true"
        assert TOKEN.encode() not in answer.content
    assert charges(key) == 1


def test_a_lost_commit_acknowledgement_leaves_only_the_redacted_answer(client: Client) -> None:
    """The crash after COMMIT: the caller got a 500, the retry the redacted replay."""
    key = new_key()
    real_commit = connection.commit

    def commit() -> None:
        real_commit()
        raise OperationalError("server closed the connection unexpectedly")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(connection, "commit", commit)
        assert post(client, "/callable/", key).status_code == 500
    retry = post(client, "/callable/", key)
    assert retry[REDACTED_HEADER] == "true"
    assert TOKEN.encode() not in retry.content
    assert charges(key) == 1


def test_a_crash_before_commit_gives_the_retry_the_full_answer(client: Client) -> None:
    """The crash before COMMIT: nothing stored, so the retry is the first execution."""
    key = new_key()

    def commit() -> None:
        raise OperationalError("could not commit")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(connection, "commit", commit)
        # Django's own COMMIT, not one carried by the record (store.carry).
        patch.setattr(carry, "carry_commit", lambda conn: False)
        assert post(client, "/callable/", key).status_code == 500
    assert charges(key) == 0
    retry = post(client, "/callable/", key)
    assert_redacted_replay(client, "/callable/", key, retry)


@pytest.mark.parametrize("value", [[], ["ok", ""], "token", 3, ["a..b"]])
def test_a_wrong_redact_option_fails_when_applied(value: Any) -> None:
    with pytest.raises(TypeError, match="redact"):
        idempotent(redact=value)
    assert [m.id for m in check_redact(value if value != "token" else "no.such.path")] == [
        "idempotency_django.E122"
    ]


def test_check_e122_accepts_the_forms() -> None:
    assert check_redact(None) == []
    assert check_redact(["token"]) == []
    assert check_redact("tests.test_redacted_replay.drop_token") == []
    assert redactor(None) is None
