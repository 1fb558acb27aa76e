"""The conformance scenarios over a form view and over views only the site-wide switch protects.

In process (Django's test client, real threads), on whichever database the run has:

- the form view (``IdempotentFormMixin``) is posted as a browser posts a form: the body
  form-encoded, the key in its ``idempotency_key`` field, never in a header
  (:class:`FormTransport` turns each scenario's JSON body and key header into that);
- a plain function view, an ``async`` one, DRF views with token authentication (an
  ``APIView``, a viewset's action, an adrf ``async`` handler) and Ninja operations (sync
  and async, API key authentication), none protected but by ``IdempotencyMiddleware``; two callers, each
  with credentials of their own, never share an answer (the ``other-caller`` scenario).

The switch protects the requests that carry a key and lets the others through, so the
``key-missing-400`` scenario (a key required) is not run on those views: by design.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlencode

import pytest
from django.db import connections
from django.test import Client

from idempotency_django.conformance import NAMES, PASS, Answer, Options, Result, run_scenarios
from idempotency_django.testing import run_conformance
from tests.testapp.models import Charge

pytestmark = [
    pytest.mark.faces,
    pytest.mark.urls("tests.testapp.switch_views"),
    pytest.mark.django_db(transaction=True),
]

HEADER = "Idempotency-Key"
FORM = "application/x-www-form-urlencoded"
FIELD = "idempotency_key"
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "idempotency_django.middleware.IdempotencyMiddleware",
]
# What each switch-only view is, and how its callers prove who they are.
SWITCHED = {
    "function": ("/switch/function/", "session"),
    "async-function": ("/switch/async/", "session"),
    "drf-token": ("/switch/drf/", "token"),
    "drf-viewset-token": ("/switch/viewset/", "token"),
    "adrf-token": ("/switch/adrf/", "token"),
    "ninja-api-key": ("/switch/ninja/charges", "api-key"),
    "ninja-async-api-key": ("/switch/ninja/async/charges", "api-key"),
}
KEY_OPTIONAL = tuple(name for name in NAMES if name != "key-missing-400")


@pytest.fixture(autouse=True)
def switched_on(settings: Any) -> None:
    settings.MIDDLEWARE = MIDDLEWARE
    settings.IDEMPOTENCY_CONFORMANCE_HOOKS = True


def executions() -> int:
    return Charge.objects.count()


def _logged_in(django_user_model: Any, name: str) -> Client:
    client = Client()
    client.force_login(django_user_model.objects.create_user(name))
    return client


def _callers(kind: str, django_user_model: Any) -> tuple[Client, Client]:
    names = ("switch-conformance-a", "switch-conformance-b")
    if kind == "session":
        first, second = (_logged_in(django_user_model, name) for name in names)
        return first, second
    if kind == "token":
        from rest_framework.authtoken.models import Token

        users = [django_user_model.objects.create_user(name) for name in names]
        first, second = (
            Client(headers={"Authorization": f"Token {Token.objects.create(user=user).key}"})
            for user in users
        )
        return first, second
    return Client(headers={"X-API-Key": "switch-alice"}), Client(
        headers={"X-API-Key": "switch-bob"}
    )


def _failures(results: list[Result]) -> list[str]:
    return [f"{r.name}: {r.verdict}: {'; '.join(r.evidence)}" for r in results if r.verdict != PASS]


@pytest.mark.parametrize("target", SWITCHED)
def test_a_view_protected_only_by_the_switch_keeps_the_contract(
    target: str, django_user_model: Any
) -> None:
    path, kind = SWITCHED[target]
    first, second = _callers(kind, django_user_model)
    results = run_conformance(
        first, path, other_client=second, executions=executions, only=KEY_OPTIONAL
    )
    assert [r.name for r in results] == list(KEY_OPTIONAL)
    assert not _failures(results), _failures(results)


# --- a form view, posted as a browser posts its form ---------------------------------------------


class FormTransport:
    """The scenarios' requests as form posts: each JSON body's fields form-encoded, the key
    header moved into the ``idempotency_key`` field; the other headers (the test hooks'
    among them) sent as they are. A body that is no JSON object is sent as it is."""

    in_process = True

    def __init__(self, client: Client, path: str, other_client: Client) -> None:
        self.client, self.path, self.other_client = client, path, other_client
        self.has_other_caller = True
        self._owner = threading.get_ident()

    @property
    def concurrent(self) -> bool:
        return not any(connections[alias].in_atomic_block for alias in connections)

    def send(self, headers: Mapping[str, str | bytes], body: bytes, *, other: bool = False) -> Any:
        client = self.other_client if other else self.client
        if threading.get_ident() == self._owner:
            return _answer(_post_form(client, self.path, headers, body))
        clone = copy.copy(client)  # another thread: a client of its own, same cookies
        clone.cookies = copy.copy(client.cookies)
        try:
            return _answer(_post_form(clone, self.path, headers, body))
        finally:
            connections.close_all()


def _post_form(client: Client, path: str, headers: Mapping[str, str | bytes], body: bytes) -> Any:
    key = headers.get(HEADER)
    rest = {
        name: _text(value, "latin-1")
        for name, value in headers.items()
        if name not in (HEADER, "Content-Type")
    }
    return client.post(path, _form_body(body, key), content_type=FORM, headers=rest)


def _form_body(body: bytes, key: str | bytes | None) -> bytes:
    try:
        fields = json.loads(body)
    except ValueError:
        fields = None
    if not isinstance(fields, dict):
        return body
    data = {name: str(value) for name, value in fields.items()}
    if key is not None:
        data[FIELD] = _text(key, "utf-8")  # a browser sends the field's text as UTF-8
    return urlencode(data).encode()


def _text(value: str | bytes, encoding: str) -> str:
    return value.decode(encoding) if isinstance(value, bytes) else value


def _answer(response: Any) -> Answer:
    headers = {name.lower(): value for name, value in response.headers.items()}
    return Answer(response.status_code, headers, bytes(response.content))


def _run_on_form(
    first: Client, second: Client, count: Callable[[], int], only: tuple[str, ...] = NAMES
) -> list[Result]:
    transport = FormTransport(first, "/switch/form/", second)
    return run_scenarios(transport, Options(executions=count, header=HEADER), only)


def _visitor() -> Client:
    """An anonymous visitor with a session of their own (the tag starts it when it renders)."""
    from django.conf import settings
    from django.contrib.sessions.backends.db import SessionStore

    session = SessionStore()
    session["_idempotency_visitor"] = True
    session.save()
    client = Client()
    client.cookies[settings.SESSION_COOKIE_NAME] = session.session_key or ""
    return client


@pytest.mark.parametrize("callers", ["users", "visitors"])
def test_a_form_view_posted_with_its_key_field_keeps_the_contract(
    callers: str, django_user_model: Any
) -> None:
    # The form's duplicate waits for the first (FORM_WAIT): in-flight-409 answers once
    # that bound is spent, the storm's duplicates get the first's answer. Two logged-in
    # users are two key spaces; so are two anonymous visitors, each their session's.
    if callers == "users":
        first, second = (_logged_in(django_user_model, name) for name in ("form-a", "form-b"))
    else:
        first, second = _visitor(), _visitor()
    results = _run_on_form(first, second, executions)
    assert [r.name for r in results] == list(NAMES)
    assert not _failures(results), _failures(results)


def test_the_form_transport_never_sends_the_key_header() -> None:
    sent: list[dict[str, Any]] = []

    class Recorder:
        def post(self, path: str, data: bytes, **kwargs: Any) -> Any:
            sent.append({"data": data, **kwargs})
            return type("R", (), {"status_code": 201, "headers": {}, "content": b"{}"})()

    transport = FormTransport(Recorder(), "/f/", Recorder())  # type: ignore[arg-type]
    transport.send({HEADER: "k-1", "Idempotency-Test-Fail": "503"}, b'{"amount": 1}')
    transport.send({HEADER: "clé".encode()}, b'{"amount": 1}')
    assert sent[0]["content_type"] == FORM
    assert sent[0]["data"] == b"amount=1&idempotency_key=k-1"
    assert sent[0]["headers"] == {"Idempotency-Test-Fail": "503"}
    assert sent[1]["data"] == b"amount=1&idempotency_key=cl%C3%A9"
