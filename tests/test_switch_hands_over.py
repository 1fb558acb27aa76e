"""What the switch hands over (issue 53): to a protection it could not see, the request;
to Django's handler, the view's exception (``process_exception``) and a streamed answer's
refusal, as a bare ``@idempotent`` would. ``tests/test_switch_differential.py`` compares
every kind of view outcome by outcome; these name the findings one by one."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.http import HttpRequest, HttpResponse
from django.test import AsyncClient, Client, RequestFactory

from idempotency_django import signals
from idempotency_django.middleware import IdempotencyMiddleware
from idempotency_django.models import IdempotencyEntry
from tests.testapp import switch_differential_views as views
from tests.testapp.models import Charge

pytestmark = [
    pytest.mark.faces,
    pytest.mark.django_db,
    pytest.mark.urls("tests.testapp.switch_differential_views"),
]

JSON = "application/json"
HIDDEN = ["/switch/hidden-by-a-decorator/", "/switch/protected-inside/", "/switch/hidden-async/"]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "tests.testapp.switch_differential_views.DomainErrorMiddleware",
    "tests.test_switch_hands_over.SeenExceptions",
    "idempotency_django.middleware.IdempotencyMiddleware",
]
seen: list[Exception] = []


class SeenExceptions:
    """Records what reaches ``process_exception`` (and answers nothing)."""

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)  # type: ignore[no-any-return]

    def process_exception(self, request: HttpRequest, exception: Exception) -> None:
        seen.append(exception)


@pytest.fixture(autouse=True)
def with_switch(settings: Any) -> None:
    settings.MIDDLEWARE = MIDDLEWARE
    seen.clear()


def _post(path: str, key: str | None, account: str, *, asgi: bool = False) -> Any:
    headers = {"X-Account": account, **({} if key is None else {"Idempotency-Key": key})}
    client: Any = AsyncClient() if asgi else Client(raise_request_exception=False)
    post = async_to_sync(client.post) if asgi else client.post
    return post(path, json.dumps({"amount": 5}), content_type=JSON, headers=headers)


@pytest.mark.parametrize("asgi", [False, True], ids=["wsgi", "asgi"])
@pytest.mark.parametrize("path", HIDDEN)
def test_bob_reusing_alices_key_behind_the_switch_gets_his_own_order(path: str, asgi: bool) -> None:
    # Before: the switch claimed with its own (empty) tenant, and replayed alice's answer.
    key = str(uuid.uuid4())
    alice = _post(path, key, "alice", asgi=asgi)
    bob = _post(path, key, "bob", asgi=asgi)
    assert alice.status_code == bob.status_code == 201
    assert bob.json()["token"] == "secret-bob"
    assert "Idempotent-Replayed" not in bob
    assert sorted(Charge.objects.values_list("reference", flat=True)) == [
        "order-alice",
        "order-bob",
    ]
    assert sorted(IdempotencyEntry.objects.values_list("tenant", flat=True)) == ["alice", "bob"]


@pytest.mark.parametrize("path", HIDDEN)
def test_a_redacted_field_behind_the_switch_is_never_replayed(path: str) -> None:
    # Before: the switch stored the answer with its own options: the token in the clear.
    key = str(uuid.uuid4())
    assert _post(path, key, "alice").json()["token"] == "secret-alice"
    replay = _post(path, key, "alice")
    assert replay["Idempotent-Replayed"] == "true"
    assert replay.json()["token"] == "[redacted]"


def test_a_request_the_switch_hands_over_is_reported_once(client: Client) -> None:
    outcomes: list[str] = []

    def receiver(sender: object, **fields: Any) -> None:
        outcomes.append(fields["outcome"])

    signals.outcome.connect(receiver)
    try:
        _post("/switch/hidden-by-a-decorator/", str(uuid.uuid4()), "alice")
    finally:
        signals.outcome.disconnect(receiver)
    assert outcomes == ["executed"]


@pytest.mark.parametrize("asgi", [False, True], ids=["wsgi", "asgi"])
def test_a_domain_error_behind_the_switch_is_the_projects_answer(asgi: bool) -> None:
    # Before: process_exception never ran behind the switch: a 500 instead of the 400.
    key = str(uuid.uuid4())
    answers = [_post("/switch/raising/", key, "alice", asgi=asgi) for _ in range(2)]
    assert [answer.status_code for answer in answers] == [400, 400]
    assert answers[1].json() == {"error": "the amount is over the account's limit"}
    assert Charge.objects.count() == IdempotencyEntry.objects.count() == 0  # as @idempotent


@pytest.mark.parametrize("path", ["/switch/streaming/", "/switch/file/"])
def test_a_streamed_answer_behind_the_switch_is_refused_as_idempotent_refuses_it(
    path: str,
) -> None:
    # As under @idempotent: the view's writes roll back, nothing is stored, and Django's
    # handler (process_exception, then its 500) gets the TypeError naming the way out.
    response = _post(path, str(uuid.uuid4()), "alice")
    assert response.status_code == 500
    [error] = seen
    assert isinstance(error, TypeError)
    assert "@idempotency_exempt" in str(error)
    assert Charge.objects.count() == IdempotencyEntry.objects.count() == 0


def test_a_switch_made_outside_djangos_handler_lets_the_exception_rise() -> None:
    switch = IdempotencyMiddleware(lambda request: HttpResponse())
    request = RequestFactory().post(
        "/switch/raising/", b"{}", content_type=JSON, headers={"Idempotency-Key": "k-1"}
    )
    request.user = type("Anonymous", (), {"is_authenticated": False})()
    with pytest.raises(views.DomainError):
        switch.process_view(request, views.raising, (), {})
