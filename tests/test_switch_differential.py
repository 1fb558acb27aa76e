"""The switch against the view's own protection, outcome by outcome (issue 53).

Every kind of view is sent the same requests twice: once with ``IdempotencyMiddleware``
installed, to the view as the switch meets it, once without it, to the view under a bare
``@idempotent`` (or its own protection: a mixin, Ninja's ``@idempotent``, a GraphQL
field, the admin's). Status, headers (less ``Date``), body, the rows the view created and
what the entries table holds must be the same, step by step.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import pytest
from django.test import Client

from idempotency_django.forms import FIELD_NAME
from idempotency_django.lookup import opened
from idempotency_django.models import IdempotencyEntry
from tests.testapp.models import Charge

pytestmark = [
    pytest.mark.faces,
    pytest.mark.django_db,
    pytest.mark.urls("tests.testapp.switch_differential_views"),
]

BARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "tests.testapp.switch_differential_views.DomainErrorMiddleware",
]
SWITCH = [*BARE, "idempotency_django.middleware.IdempotencyMiddleware"]
# Volatile, or following the body (compared itself), whose row ids differ between runs.
VOLATILE = {"date", "expires", "last-modified", "content-length"}
JSON = "application/json"
FORM = "application/x-www-form-urlencoded"


@dataclass(frozen=True)
class Kind:
    """One kind of view: its two paths, who calls it, how its requests look."""

    name: str
    switch: str
    bare: str
    caller: str = "session"  # session | token | api-key | account
    body: str = "json"  # json | form | admin | strawberry | graphene
    # Its protection is hidden from the switch, which withdraws when it meets it: the
    # switch had read the caller from the session by then (SessionMiddleware's Vary).
    hidden: bool = False


def _kind(name: str, **kwargs: Any) -> Kind:
    return Kind(name, f"/switch/{name}/", f"/bare/{name}/", **kwargs)


def _same(name: str, path: str, **kwargs: Any) -> Kind:
    """A view protecting itself: the one path, with the switch and without."""
    return Kind(name, path, path, **kwargs)


KINDS = [
    _kind("function"),
    _kind("async"),
    _kind("class"),
    _kind("method-decorator"),
    _kind("hidden-by-a-decorator", caller="account", hidden=True),
    _kind("protected-inside", caller="account", hidden=True),
    _kind("hidden-async", caller="account", hidden=True),
    _kind("hidden-put-only", caller="account", hidden=True),
    _kind("delegating", body="form"),
    _kind("inner-call"),
    _kind("streaming"),
    _kind("file"),
    _kind("raising"),
    _kind("plain-form", body="form"),
    _kind("form-mixin", body="form"),
    _kind("exempt"),
    _kind("drf", caller="token"),
    _kind("adrf", caller="token"),
    _kind("drf-function", caller="token"),
    _kind("viewset", caller="token"),
    Kind("ninja", "/switch/ninja/charges", "/switch/ninja/protected/charges", caller="api-key"),
    _same("admin", "/forms-admin/testapp/charge/add/", body="admin"),
    _same("strawberry", "/graphql/", body="strawberry"),
    _same("graphene", "/graphene/", body="graphene"),
]


@dataclass
class Callers:
    """Alice and Bob, each a logged-in client with their DRF token; and an anonymous one."""

    users: dict[str, Any]
    tokens: dict[str, str]

    def clients(self) -> dict[str, Client]:
        """New clients: a client loads MIDDLEWARE at its first request, once."""
        clients = {who: Client(raise_request_exception=False) for who in (*self.users, "")}
        for who, user in self.users.items():
            clients[who].force_login(user)
        return clients

    def of(self, clients: dict[str, Client], kind: Kind, who: str) -> tuple[Client, dict[str, str]]:
        if kind.caller == "account":  # one anonymous client naming two accounts
            return clients[""], {"X-Account": who}
        if kind.caller == "token":
            return clients[who], {"Authorization": f"Token {self.tokens[who]}"}
        if kind.caller == "api-key":
            return clients[who], {"X-API-Key": f"switch-{who}"}
        return clients[who], {}


@pytest.fixture
def callers(django_user_model: Any) -> Callers:
    from rest_framework.authtoken.models import Token

    users = {
        who: django_user_model.objects.create_superuser(who, f"{who}@example.com", "pw")
        for who in ("alice", "bob")
    }
    return Callers(users, {who: Token.objects.create(user=u).key for who, u in users.items()})


def _payload(kind: Kind, amount: int, key: str | None) -> tuple[bytes | str, str, dict[str, str]]:
    """The body, its content type, and the key's header (a form carries it in a field)."""
    header = {} if key is None else {"Idempotency-Key": key}
    if kind.body in ("form", "admin"):
        fields = {"reference": "r", "amount": str(amount)}
        fields.update({"_save": "Save"} if kind.body == "admin" else {})
        fields.update({} if key is None else {FIELD_NAME: key})
        return urlencode(fields), FORM, {}
    if kind.body == "strawberry":
        query = f'mutation {{ charge(reference: "g", amount: {amount}) {{ id amount }} }}'
        return json.dumps({"query": query}), JSON, header
    if kind.body == "graphene":
        query = f'mutation {{ charge(reference: "g", amount: {amount}) {{ id reference }} }}'
        return json.dumps({"query": query}), JSON, header
    return json.dumps({"amount": amount}), JSON, header


# (step, who, which key, amount): a first request, its replay, the key with another payload,
# the key from another caller (and that caller's replay), no key.
STEPS = [
    ("first", "alice", 0, 7),
    ("replay", "alice", 0, 7),
    ("changed", "alice", 0, 8),
    ("other caller", "bob", 0, 7),
    ("other caller's replay", "bob", 0, 7),
    ("keyless", "alice", None, 7),
    ("second key", "alice", 1, 7),
]


@dataclass
class Run:
    """One pass over the steps: its keys, and the rows its answers named, in order."""

    keys: list[str]
    rows: dict[str, int] = field(default_factory=dict)

    def normal(self, text: str) -> str:
        for role, key in zip("AB", self.keys, strict=True):
            text = text.replace(key, f"<key {role}>")
        return _ROW_ID.sub(self._row, text)

    def _row(self, match: re.Match[str]) -> str:
        # By order of appearance: a server's sequences don't restart where the table ends.
        number = self.rows.setdefault(match.group(2), len(self.rows) + 1)
        return f"{match.group(1)}<row {number}>"


# Where a row's id appears in the views' answers.
_ROW_ID = re.compile(r'("id": ?"?|/done/|charge )(\d+)')


def _content(response: Any) -> bytes:
    if getattr(response, "streaming", False):
        return b"".join(response.streaming_content)
    return bytes(response.content)


def _outcome(kind: Kind, step: str, run: Run, response: Any, effects: int) -> dict[str, Any]:
    # A keyless request behind the switch is left untouched: it never reads the session,
    # where @idempotent resolves the tenant of request.idempotency (SessionMiddleware's Vary).
    volatile = VOLATILE | ({"vary"} if step == "keyless" or kind.hidden else set())
    headers = {
        name.lower(): run.normal(value)
        for name, value in response.items()
        if name.lower() not in volatile
    }
    body = run.normal(_content(response).decode(errors="replace"))
    return {"status": response.status_code, "headers": headers, "body": body, "effects": effects}


def _stored(run: Run) -> list[tuple[str, str, str, str]]:
    """The entries the run left: (tenant, key, status, the stored answer), by role."""
    rows = []
    for entry in IdempotencyEntry.objects.order_by("created_at", "pk"):
        if not any(key in entry.key for key in run.keys):
            continue
        answer, _ = opened(entry, "default")
        stored = "" if answer is None else f"{answer.status} {answer.body.decode()}"
        rows.append((entry.tenant, run.normal(entry.key), entry.status, run.normal(stored)))
    return rows


def _run(kind: Kind, callers: Callers, path: str) -> list[Any]:
    run = Run([str(uuid.uuid4()) for _ in range(2)])
    outcomes: list[Any] = []
    clients = callers.clients()
    for step, who, role, amount in STEPS:
        client, headers = callers.of(clients, kind, who)
        key = None if role is None else run.keys[role]
        body, content_type, key_header = _payload(kind, amount, key)
        before = Charge.objects.count()
        response = client.post(path, body, content_type, headers={**headers, **key_header})
        effects = Charge.objects.count() - before
        outcomes.append((step, _outcome(kind, step, run, response, effects)))
    outcomes.append(("stored", _stored(run)))
    return outcomes


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
def test_the_switch_answers_every_request_as_the_views_own_protection(
    kind: Kind, callers: Callers, settings: Any
) -> None:
    if kind.body == "graphene":
        pytest.importorskip("graphene_django")
    settings.IDEMPOTENCY_REQUIRED = False  # the switch never requires a key: nor does bare
    settings.MIDDLEWARE = SWITCH
    with_switch = _run(kind, callers, kind.switch)
    settings.MIDDLEWARE = BARE
    bare = _run(kind, callers, kind.bare)
    differing = {
        step: {"switch": switched, "bare": alone}
        for (step, switched), (_, alone) in zip(with_switch, bare, strict=True)
        if switched != alone
    }
    assert not differing
