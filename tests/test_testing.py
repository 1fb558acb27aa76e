"""``idempotency_django.testing``: the assertions pass on safe views and fail loudly otherwise."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.test import Client, TestCase, override_settings
from django.urls import include, path
from rest_framework.test import APIClient

from idempotency_django import idempotent
from idempotency_django._protocol.responses import problem_response
from idempotency_django.exceptions import (
    KeyMalformed,
    KeyReused,
    RequestInProgress,
    StoreUnavailable,
)
from idempotency_django.testing import (
    IdempotencyAssertionsMixin,
    Replay,
    assert_in_progress,
    assert_key_malformed,
    assert_key_missing,
    assert_key_reused,
    assert_problem,
    assert_replayed,
    assert_replays,
    new_key,
    send,
)
from tests.testapp import views
from tests.testapp.models import Charge


def unprotected(request: HttpRequest) -> HttpResponse:
    Charge.objects.create(reference="unprotected", amount=1)
    return JsonResponse({"charges": Charge.objects.count()}, status=201)


@idempotent
def echo(request: HttpRequest) -> HttpResponse:
    """Answers what it received, so the tests see how the helpers encode a request."""
    Charge.objects.create(reference=request.idempotency.key, amount=1)  # type: ignore[attr-defined]
    body = {"content_type": request.content_type, "post": request.POST.dict()}
    if request.content_type == "application/json":
        body["json"] = json.loads(request.body or b"null")
    return JsonResponse(body, status=201)


urlpatterns = [
    path("charges/", views.charge),
    path("echo/", echo),
    path("unprotected/", unprotected),
    path("api/", include("tests.testapp.api_urls")),
]

pytestmark = [pytest.mark.faces, pytest.mark.django_db, pytest.mark.urls(__name__)]


def test_a_protected_view_replays(client: Client) -> None:
    replay = assert_replays(client, "/charges/", {"amount": 7}, executions=Charge.objects.count)
    assert isinstance(replay, Replay)
    assert replay.first.status_code == 201
    assert Charge.objects.get().reference == replay.key


def test_the_key_given_is_the_key_sent(client: Client) -> None:
    assert assert_replays(client, "/charges/", key="order-42").key == "order-42"
    assert Charge.objects.get().reference == "order-42"


def test_an_unprotected_view_fails(client: Client) -> None:
    with pytest.raises(AssertionError, match="Idempotent-Replayed: true"):
        assert_replays(client, "/unprotected/", {})


def test_a_key_used_before_fails(client: Client) -> None:
    send(client, "/charges/", {"amount": 1}, key="used")
    with pytest.raises(AssertionError, match="already a replay"):
        assert_replays(client, "/charges/", {"amount": 1}, key="used")


def test_executions_must_grow_by_exactly_one(client: Client) -> None:
    counts = iter([0, 2, 2])
    with pytest.raises(AssertionError, match="grew by 2, not 1"):
        assert_replays(client, "/charges/", executions=lambda: next(counts))


def test_json_form_and_raw_bodies(client: Client) -> None:
    as_json = assert_replays(client, "/echo/", {"b": [1, 2]}).first.json()
    assert as_json["json"] == {"b": [1, 2]}
    as_form = assert_replays(client, "/echo/", {"a": "1"}, content_type=None).first.json()
    assert as_form["post"] == {"a": "1"}
    raw = assert_replays(client, "/echo/", "a=1", content_type="text/plain").first.json()
    assert raw["content_type"] == "text/plain"
    empty = assert_replays(client, "/echo/", method="put").first.json()
    assert empty["post"] == {}  # no body at all


def test_a_drf_client_works_too(django_user_model: Any) -> None:
    client = APIClient()
    client.force_authenticate(django_user_model.objects.create(username="u"))
    replay = assert_replays(client, "/api/charges/", {"amount": 3}, executions=Charge.objects.count)
    assert replay.first.status_code == 201


@override_settings(IDEMPOTENCY_HEADER="X-Request-Key")
def test_the_header_follows_the_setting(client: Client) -> None:
    assert_replays(client, "/charges/", executions=Charge.objects.count)
    assert_key_missing(send(client, "/charges/", key="k", header="Idempotency-Key"))


def replayable(status: int = 201, body: bytes = b"{}", replayed: bool = False) -> HttpResponse:
    response = HttpResponse(body, status=status)
    if replayed:
        response["Idempotent-Replayed"] = "true"
    return response


@pytest.mark.parametrize(
    ("second", "message"),
    [
        (replayable(201, b"{}"), "no 'Idempotent-Replayed: true'"),
        (replayable(200, b"{}", replayed=True), "replayed status 200 differs"),
        (replayable(201, b"{ }", replayed=True), "body differs"),
    ],
)
def test_assert_replayed_names_what_differs(second: HttpResponse, message: str) -> None:
    with pytest.raises(AssertionError, match=message):
        assert_replayed(replayable(), second)


def test_the_problem_answers(client: Client) -> None:
    assert assert_key_missing(send(client, "/charges/", key=None))["status"] == 400
    assert_key_malformed(send(client, "/charges/", key="bad key\x7f"))
    send(client, "/charges/", {"amount": 1}, key="k")
    assert_key_reused(send(client, "/charges/", {"amount": 2}, key="k"))
    problem = assert_in_progress(problem_response(RequestInProgress(retry_after=3)))
    assert problem["status"] == 409
    assert_problem(problem_response(StoreUnavailable()), 503, "unavailable")
    assert assert_problem(problem_response(StoreUnavailable()), 503)["status"] == 503


@pytest.mark.parametrize(
    ("response", "message"),
    [
        (problem_response(KeyReused()), "expected 409"),
        (HttpResponse("{}", status=409, content_type="application/json"), "problem\\+json"),
        (HttpResponse("[]", status=409, content_type="application/problem+json"), "JSON object"),
        (
            HttpResponse('{"type": "x"}', status=409, content_type="application/problem+json"),
            "lacks",
        ),
    ],
)
def test_assert_in_progress_fails_on_other_answers(response: HttpResponse, message: str) -> None:
    with pytest.raises(AssertionError, match=message):
        assert_in_progress(response)


def test_a_409_needs_retry_after() -> None:
    response = problem_response(RequestInProgress())
    del response["Retry-After"]
    with pytest.raises(AssertionError, match="Retry-After"):
        assert_in_progress(response)


def test_the_problem_code_is_checked() -> None:
    with pytest.raises(AssertionError, match="'key-missing' problem"):
        assert_key_missing(problem_response(KeyMalformed("x")))
    body = json.dumps({"type": "t", "title": "t", "status": 400, "detail": ""})
    lying = HttpResponse(body, status=422, content_type="application/problem+json")
    with pytest.raises(AssertionError, match="problem's status"):
        assert_problem(lying, 422)


def test_new_keys_differ() -> None:
    assert new_key() != new_key()


class UnittestStyle(IdempotencyAssertionsMixin, TestCase):
    """The same helpers as methods, inside Django's TestCase (one outer transaction)."""

    def test_methods(self) -> None:
        replay = self.assertReplays("/charges/", {"amount": 5}, executions=Charge.objects.count)
        self.assertReplayed(replay.first, replay.second)
        self.assertKeyMissing(send(self.client, "/charges/", key=None))
        self.assertKeyMalformed(send(self.client, "/charges/", key=""))
        self.assertKeyReused(send(self.client, "/charges/", {"amount": 6}, key=replay.key))
        self.assertInProgress(problem_response(RequestInProgress()))
        self.assertProblem(problem_response(StoreUnavailable()), 503, "unavailable")
