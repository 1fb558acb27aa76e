"""Asking about a key: ``GET …/keys/<key>/`` (Django, DRF, Ninja) and ``lookup()``.

A caller sees its own keys only: with two users and one key, each sees its own
answer, and a key only the other used is as unknown as one never sent.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from django.contrib.auth.models import User
from django.db import OperationalError, connection
from django.test import Client
from django.utils import timezone

from idempotency_django import views
from idempotency_django.lookup import KeyStatus, lookup
from idempotency_django.models import IdempotencyEntry
from tests.lock_helpers import lock_id

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.testapp.lookup_urls")]

MOUNTS = ["/idempotency/keys/", "/drf/idempotency/keys/", "/ninja-keys/idempotency/keys/"]


@pytest.fixture
def alice() -> Client:
    return logged_in("alice")


@pytest.fixture
def bob() -> Client:
    return logged_in("bob")


def logged_in(name: str) -> Client:
    client = Client(raise_request_exception=False)
    client.force_login(User.objects.create_user(name))
    return client


def post(client: Client, key: str, **body: Any) -> int:
    response = client.post(
        "/charges/", body, content_type="application/json", headers={"Idempotency-Key": key}
    )
    return response.status_code


def ask(client: Client, mount: str, key: str) -> Any:
    return client.get(f"{mount}{key}/")


@pytest.mark.parametrize("mount", MOUNTS)
def test_each_caller_sees_its_own_answer_for_one_key(
    mount: str, alice: Client, bob: Client
) -> None:
    key = str(uuid.uuid4())
    assert post(alice, key) == 201

    unknown = ask(bob, mount, key)
    assert unknown.status_code == 404
    assert unknown["Content-Type"] == "application/problem+json"
    assert key not in unknown.content.decode()

    assert post(bob, key, status=402) == 402
    mine, theirs = ask(alice, mount, key), ask(bob, mount, key)
    assert (mine.json()["status"], mine.json()["response_status"]) == ("completed", 201)
    assert (theirs.json()["status"], theirs.json()["response_status"]) == ("failed_final", 402)
    assert mine["Cache-Control"] == "private, no-store"
    assert mine.json()["created_at"] < mine.json()["expires_at"]


# Committed: in one test transaction the claim's advisory lock would outlive its request.
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("mount", MOUNTS)
def test_a_key_whose_request_rolled_back_is_unknown(mount: str, alice: Client) -> None:
    key = str(uuid.uuid4())
    assert post(alice, key, status=503) == 503
    assert ask(alice, mount, key).status_code == 404


@pytest.mark.parametrize("mount", MOUNTS)
def test_a_key_in_progress_says_when_to_ask_again(mount: str, alice: Client) -> None:
    user = User.objects.get(username="alice")
    now = timezone.now()
    IdempotencyEntry.objects.create(
        tenant=str(user.pk),
        key="in-flight/1",  # a "/" in a key: the URL takes it whole
        fingerprint="x",
        locked_until=now + timedelta(seconds=30),
        created_at=now,
        expires_at=now + timedelta(days=1),
    )
    answer = ask(alice, mount, "in-flight/1")
    assert answer.status_code == 200
    assert answer.json()["status"] == "in_progress"
    assert 1 <= int(answer["Retry-After"]) <= 30
    assert answer.json()["retry_after"] == int(answer["Retry-After"])


@pytest.mark.parametrize("mount", MOUNTS)
def test_anonymous_callers_and_bad_keys_are_refused(mount: str, alice: Client) -> None:
    anonymous = Client().get(f"{mount}some-key/")
    assert anonymous.status_code == 401
    if mount.startswith("/drf/"):
        assert anonymous["WWW-Authenticate"] == "Token"  # DRF's first authentication class
    assert ask(alice, mount, "x" * 300).status_code == 400


def test_only_get_and_head() -> None:
    assert Client().post("/idempotency/keys/k/").status_code == 405


@pytest.mark.urls("tests.testapp.urls")
def test_off_unless_included(alice: Client) -> None:
    key = str(uuid.uuid4())
    assert post(alice, key) == 201
    assert ask(alice, "/idempotency/keys/", key).status_code == 404
    assert b"completed" not in ask(alice, "/idempotency/keys/", key).content


def test_lookup_for_tasks_and_calls(alice: Client) -> None:
    key = str(uuid.uuid4())
    assert post(alice, key) == 201
    tenant = str(User.objects.get(username="alice").pk)
    found = lookup(key, tenant=tenant)
    assert isinstance(found, KeyStatus)
    assert (found.status, found.response_status, found.retry_after) == ("completed", 201, None)
    assert lookup(key, tenant="someone else") is None
    assert lookup(key, tenant=tenant, using="default") == found


# Committed: in one test transaction the view's advisory lock would outlive its request.
@pytest.mark.django_db(transaction=True)
def test_an_expired_entry_is_unknown(alice: Client) -> None:
    key = str(uuid.uuid4())
    assert post(alice, key) == 201
    IdempotencyEntry.objects.filter(key=key).update(expires_at=timezone.now() - timedelta(1))
    assert ask(alice, MOUNTS[0], key).status_code == 404


@pytest.mark.requires_postgres
def test_a_lock_protocol_request_in_flight_is_in_progress(alice: Client) -> None:
    """Its claim is only an advisory lock (no committed row): the lookup reads pg_locks."""
    tenant = str(User.objects.get(username="alice").pk)
    with holding_the_lock_of("held-key", tenant):
        answer = ask(alice, MOUNTS[0], "held-key")
        assert (answer.status_code, answer.json()["status"]) == (200, "in_progress")
        assert answer["Retry-After"] == "1"
    assert ask(alice, MOUNTS[0], "held-key").status_code == 404


@contextmanager
def holding_the_lock_of(key: str, tenant: str) -> Iterator[None]:
    settings = connection.settings_dict
    conninfo = {
        "dbname": connection.settings_dict["NAME"],
        "host": settings["HOST"] or "127.0.0.1",
        "port": settings["PORT"] or 5432,
        "user": settings["USER"],
        "password": settings["PASSWORD"],
    }
    with psycopg.connect(**{k: v for k, v in conninfo.items() if v}) as other:
        other.execute("SELECT pg_advisory_xact_lock(%s::bigint)", [lock_id(key, tenant)])
        yield
        other.rollback()


def test_an_unreachable_store_is_503(alice: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    def unreachable(*args: object, **kwargs: object) -> None:
        raise OperationalError("connection refused")

    monkeypatch.setattr(views, "lookup", unreachable)
    answer = ask(alice, MOUNTS[0], "any-key")
    assert (answer.status_code, answer["Content-Type"]) == (503, "application/problem+json")
    assert answer["Retry-After"] == "5"


def gateway_account(request: Any) -> str:
    """A tenant resolver of a deployment behind an API gateway: no Django user at all."""
    return str(request.headers.get("X-Account", ""))


@pytest.mark.parametrize("mount", MOUNTS[:2])
def test_a_caller_named_by_the_tenant_resolver_without_a_django_user_sees_its_keys(
    mount: str, settings: Any
) -> None:
    settings.IDEMPOTENCY_TENANT_RESOLVER = gateway_account
    key, acme = str(uuid.uuid4()), Client(headers={"X-Account": "acme"})
    assert post(acme, key) == 201
    mine = ask(acme, mount, key)
    assert (mine.status_code, mine.json()["status"]) == (200, "completed")
    assert ask(Client(headers={"X-Account": "globex"}), mount, key).status_code == 404
    nobody = ask(Client(), mount, key)  # the resolver names no tenant: an empty key space
    assert (nobody.status_code, nobody["Content-Type"]) == (401, "application/problem+json")


def _answers_of_every_kind(mount: str, alice: Client, monkeypatch: pytest.MonkeyPatch) -> Any:
    yield "404", ask(alice, mount, str(uuid.uuid4()))
    yield "400", ask(alice, mount, "x" * 300)
    yield "401", Client().get(f"{mount}some-key/")
    if not mount.startswith("/ninja"):  # Ninja answers a wrong method before its operation
        yield "405", Client().post(f"{mount}some-key/")

    def unreachable(*args: object, **kwargs: object) -> None:
        raise OperationalError("connection refused")

    monkeypatch.setattr(views, "lookup", unreachable)
    yield "503", ask(alice, mount, "any-key")


@pytest.mark.parametrize("mount", MOUNTS)
def test_every_answer_of_the_lookup_is_private_and_never_stored(
    mount: str, alice: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    for status, answer in _answers_of_every_kind(mount, alice, monkeypatch):
        assert str(answer.status_code) == status
        assert answer["Cache-Control"] == "private, no-store", status


def test_the_drf_401_carries_a_challenge_with_drfs_default_authentication() -> None:
    """DRF's defaults put SessionAuthentication (no challenge) before Basic: the first
    class that has a challenge gives it, as RFC 9110 §11.6.1 asks of every 401."""
    anonymous = Client().get("/drf-defaults/idempotency/keys/some-key/")
    assert anonymous.status_code == 401
    assert anonymous["WWW-Authenticate"] == 'Basic realm="api"'


def test_a_basic_auth_caller_of_the_plain_include_is_pointed_at_key_status_view() -> None:
    User.objects.create_user("carol", password="secret")
    basic = Client(headers={"Authorization": "Basic Y2Fyb2w6c2VjcmV0"})  # carol:secret
    refused = basic.get("/idempotency/keys/some-key/")
    assert refused.status_code == 401
    assert "rest_framework_keys.KeyStatusView" in refused.json()["detail"]
    anonymous = Client().get("/idempotency/keys/some-key/").json()["detail"]
    assert "KeyStatusView" not in anonymous
