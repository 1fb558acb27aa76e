"""``IdempotentMixin``: SPEC's HTTP table through DRF views, viewsets and actions.

Runs on SQLite and, in the PostgreSQL pass, on PostgreSQL (the storm only there).
``transaction=True`` so that the claim commits on its own, as in production.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from django.db.models.functions import Now
from django.test import Client, RequestFactory, override_settings
from django.urls import URLPattern, path
from django.utils import timezone
from django.utils.crypto import get_random_string
from rest_framework.authtoken.models import Token
from rest_framework.test import APIRequestFactory
from rest_framework.views import APIView

from idempotency_django._protocol.fingerprint import keyed, request_fingerprint
from idempotency_django.exceptions import PROBLEM_BASE, IdempotencyError, RequestInProgress
from idempotency_django.models import IdempotencyEntry
from idempotency_django.rest_framework import (
    IdempotencyAPIError,
    RequestInProgressError,
    to_api_exception,
)
from tests.factories import ChargeFactory, IdempotencyEntryFactory
from tests.helpers import charges, new_key, problem, race, stored_answer, unreachable_database
from tests.testapp import api
from tests.testapp.models import Charge

pytestmark = [pytest.mark.faces, pytest.mark.versions, pytest.mark.django_db(transaction=True)]
Status = IdempotencyEntry.Status
CHARGES = "/api/charges/"


def token_client(user: User) -> Client:
    token, _ = Token.objects.get_or_create(user=user)
    return Client(raise_request_exception=False, HTTP_AUTHORIZATION=f"Token {token.key}")


def send(
    client: Client,
    method: str,
    path: str,
    key: str | None,
    body: Any = None,
    **headers: str,
) -> Any:
    """Send a JSON body with an idempotency key (``None`` sends no header)."""
    if key is not None:
        headers["Idempotency-Key"] = key
    payload = json.dumps({"amount": 100} if body is None else body)
    return getattr(client, method)(path, payload, content_type="application/json", headers=headers)


@pytest.fixture
def alice() -> User:
    return User.objects.create_user("alice", password="pw")


@pytest.fixture
def bob() -> User:
    return User.objects.create_user("bob", password="pw")


@pytest.fixture
def client(alice: User) -> Client:
    return token_client(alice)


def replayed(first: Any, replay: Any) -> bool:
    """The replay is the first answer, byte for byte, marked as a replay."""
    assert replay["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first
    assert (replay.status_code, replay.content) == (first.status_code, first.content)
    for header in ("Content-Type", "Location", "Vary", "Allow"):
        if header in first:  # see test_replay_of_an_answer_without_content_type
            assert replay[header] == first[header], header
    return True


def entry(key: str) -> IdempotencyEntry:
    return IdempotencyEntry.objects.get(key=key)


def no_entry(key: str) -> bool:
    return not IdempotencyEntry.objects.filter(key=key).exists()


# Passing through


def test_safe_methods_pass_through_untouched(client: Client) -> None:
    ChargeFactory.create()
    for method in ("get", "head", "options"):
        response = getattr(client, method)(CHARGES, headers={"Idempotency-Key": new_key()})
        assert response.status_code == 200
        assert "Idempotent-Replayed" not in response
    assert not IdempotencyEntry.objects.exists()


def test_unprotected_method_ignores_the_key(client: Client) -> None:
    key = new_key()
    assert send(client, "post", "/api/put-only/", key).status_code == 201
    assert send(client, "post", "/api/put-only/", key).status_code == 201
    assert charges("") == 2
    assert not IdempotencyEntry.objects.exists()


def test_methods_attribute_protects_the_listed_methods(client: Client) -> None:
    key = new_key()
    first = send(client, "put", "/api/put-only/", key)
    assert replayed(first, send(client, "put", "/api/put-only/", key))
    assert charges(key) == 1


def test_method_not_allowed_is_answered_before_any_claim(client: Client) -> None:
    response = send(client, "patch", "/api/generic/", new_key())
    assert response.status_code == 405
    assert not IdempotencyEntry.objects.exists()


# The key


def test_missing_key_is_400_problem_and_nothing_runs(client: Client) -> None:
    response = send(client, "post", CHARGES, None)
    assert response.status_code == 400
    assert problem(response)["type"] == PROBLEM_BASE + "key-missing"
    assert "Idempotency-Key" in problem(response)["detail"]
    assert not Charge.objects.exists()
    assert not IdempotencyEntry.objects.exists()


def test_optional_key_runs_unprotected_without_one(client: Client) -> None:
    assert send(client, "post", "/api/optional/", None).status_code == 201
    assert send(client, "post", "/api/optional/", None).status_code == 201
    assert Charge.objects.count() == 2
    key = new_key()
    first = send(client, "post", "/api/optional/", key)
    assert replayed(first, send(client, "post", "/api/optional/", key))


@override_settings(IDEMPOTENCY_REQUIRED=False)
def test_required_setting_reaches_the_mixin(client: Client) -> None:
    assert send(client, "post", CHARGES, None).status_code == 201


@pytest.mark.parametrize("raw", ["", "a b", "x" * 256, '"unterminated'])
def test_malformed_key_is_400_problem(client: Client, raw: str) -> None:
    response = send(client, "post", CHARGES, raw)
    assert response.status_code == 400
    assert problem(response)["type"] == PROBLEM_BASE + "key-malformed"
    assert not Charge.objects.exists()


def test_quoted_structured_field_string_means_its_content(client: Client) -> None:
    first = send(client, "post", CHARGES, '"abc"')
    assert replayed(first, send(client, "post", CHARGES, "abc"))
    assert charges("abc") == 1


def test_header_attribute_and_ttl_attribute(client: Client) -> None:
    key = new_key()
    path = "/api/custom-header/"
    assert send(client, "post", path, key).status_code == 400
    first = send(client, "post", path, None, **{"X-Request-Key": key})
    replay = send(client, "post", path, None, **{"X-Request-Key": key})
    assert replayed(first, replay)
    expires_in = entry(key).expires_at - timezone.now()
    assert timedelta(seconds=50) < expires_in <= timedelta(seconds=60)


def test_key_and_tenant_hooks() -> None:
    client = Client(raise_request_exception=False)
    body = {"event_id": "evt_1", "type": "charge.succeeded"}
    first = send(client, "post", "/api/webhook/", None, body)
    again = send(client, "post", "/api/webhook/", None, body)
    assert first.status_code == again.status_code == 204
    assert again["Idempotent-Replayed"] == "true"
    assert entry("evt_1").tenant == "stripe"
    assert charges("evt_1") == 1


# First request, replay, every kind of view


def test_first_request_runs_once_and_is_stored_for_the_drf_user(
    client: Client, alice: User
) -> None:
    key = new_key()
    response = send(client, "post", CHARGES, key)
    assert response.status_code == 201
    assert json.loads(response.content)["reference"] == key  # request.idempotency.key
    stored = entry(key)
    assert stored.status == Status.COMPLETED
    assert stored.tenant == str(alice.pk)
    assert stored_answer(stored).body == response.content


def _detail(charge: Charge) -> str:
    return f"{CHARGES}{charge.pk}/"


VIEWSET_ACTIONS: list[tuple[str, str, Callable[[Charge], str], dict[str, Any], int]] = [
    ("create", "post", lambda charge: CHARGES, {"amount": 5}, 201),
    ("update", "put", _detail, {"amount": 6}, 200),
    ("partial_update", "patch", _detail, {"amount": 7}, 200),
    ("destroy", "delete", _detail, {}, 204),
    ("custom action", "post", lambda charge: f"{_detail(charge)}refund/", {}, 201),
]


@pytest.mark.parametrize(
    ("method", "url", "body", "status"),
    [action[1:] for action in VIEWSET_ACTIONS],
    ids=[action[0] for action in VIEWSET_ACTIONS],
)
def test_every_viewset_action_runs_once_and_replays(
    client: Client,
    method: str,
    url: Callable[[Charge], str],
    body: dict[str, Any],
    status: int,
) -> None:
    key = new_key()
    target = ChargeFactory.create(amount=50)
    first = send(client, method, url(target), key, body)
    replay = send(client, method, url(target), key, body)
    assert first.status_code == status
    assert replayed(first, replay)
    assert charges(key) == 1


@pytest.mark.parametrize("path", ["/api/apiview/", "/api/generic/"])
def test_apiview_and_generic_view_run_once_and_replay(client: Client, path: str) -> None:
    key = new_key()
    first = send(client, "post", path, key)
    assert first.status_code == 201
    assert replayed(first, send(client, "post", path, key))
    assert charges(key) == 1


def test_replay_of_an_answer_without_content_type(client: Client) -> None:
    key, target = new_key(), ChargeFactory.create()
    first = send(client, "delete", _detail(target), key)
    assert (first.status_code, first.get("Content-Type")) == (204, None)
    replay = send(client, "delete", _detail(target), key)
    assert replay["Idempotent-Replayed"] == "true"
    assert replay.get("Content-Type") is None


def test_json_key_order_and_spacing_do_not_change_the_fingerprint(client: Client) -> None:
    key = new_key()
    headers = {"Idempotency-Key": key}
    body, reordered = '{"amount": 7, "note": "x"}', '{ "note":"x",\n"amount":7 }'
    client.post(CHARGES, body, content_type="application/json", headers=headers)
    again = client.post(CHARGES, reordered, content_type="application/json", headers=headers)
    assert again["Idempotent-Replayed"] == "true"
    assert charges(key) == 1


@pytest.mark.parametrize("accept", ["text/plain", "text/html"])
def test_replay_is_the_stored_rendering_whatever_the_retry_accepts(
    client: Client, accept: str
) -> None:
    key = new_key()
    first = send(client, "post", CHARGES, key, Accept=accept)
    assert first["Content-Type"].startswith(accept)
    replay = send(client, "post", CHARGES, key, Accept="application/json")
    assert replayed(first, replay)
    assert charges(key) == 1


# Reuse and in-flight duplicates


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("post", CHARGES, {"amount": 101}),
        ("post", f"{CHARGES}?currency=eur", {"amount": 100}),
        ("post", "/api/apiview/", {"amount": 100}),
        ("put", "/api/apiview/", {"amount": 100}),
    ],
    ids=["body", "query", "path", "method"],
)
def test_reuse_with_another_request_is_422_and_reveals_nothing(
    client: Client, method: str, path: str, body: dict[str, int]
) -> None:
    key = new_key()
    first = send(client, "post", CHARGES, key, {"amount": 100})
    response = send(client, method, path, key, body)
    assert response.status_code == 422
    assert problem(response)["type"] == PROBLEM_BASE + "key-reused"
    assert first.content not in response.content
    assert charges(key) == 1


def test_in_flight_duplicate_is_409_with_retry_after(client: Client) -> None:
    key = new_key()
    first = send(client, "post", CHARGES, key)
    IdempotencyEntry.objects.filter(key=key).update(
        status=Status.IN_PROGRESS, locked_until=timezone.now() + timedelta(seconds=60)
    )
    response = send(client, "post", CHARGES, key)
    assert response.status_code == 409
    assert int(response["Retry-After"]) >= 1
    assert problem(response)["type"] == PROBLEM_BASE + "in-progress"
    assert first.content not in response.content
    assert charges(key) == 1


# Outcomes


@pytest.mark.parametrize("status", [500, 503, 408, 409, 425, 429])
def test_transient_answer_rolls_back_and_frees_the_key(client: Client, status: int) -> None:
    key = new_key()
    assert send(client, "post", CHARGES, key, {"amount": 1, "status": status}).status_code == status
    assert charges(key) == 0
    assert no_entry(key)
    assert send(client, "post", CHARGES, key, {"amount": 2}).status_code == 201
    assert charges(key) == 1


@pytest.mark.parametrize(
    ("failure", "status"),
    [
        ("runtime", 500),
        ("api500", 500),
        ("unavailable", 503),
        ("conflict", 409),
        ("throttled", 429),
    ],
)
def test_raised_5xx_transient_or_unhandled_rolls_back_and_frees_the_key(
    client: Client, failure: str, status: int
) -> None:
    key = new_key()
    response = send(client, "post", CHARGES, key, {"amount": 1, "fail": failure})
    assert response.status_code == status
    assert charges(key) == 0
    assert no_entry(key)
    # A different body would be 422 had the failure been stored.
    assert send(client, "post", CHARGES, key, {"amount": 2}).status_code == 201
    assert charges(key) == 1


def test_validation_error_is_final_and_replayed(client: Client) -> None:
    key = new_key()
    first = send(client, "post", CHARGES, key, {"amount": -1})
    assert first.status_code == 400
    assert "amount" in json.loads(first.content)
    assert replayed(first, send(client, "post", CHARGES, key, {"amount": -1}))
    assert entry(key).status == Status.FAILED_FINAL


def test_raised_final_4xx_commits_with_its_writes_and_is_replayed(client: Client) -> None:
    key = new_key()
    first = send(client, "post", CHARGES, key, {"amount": 1, "fail": "notfound"})
    assert first.status_code == 404
    assert replayed(first, send(client, "post", CHARGES, key, {"amount": 1, "fail": "notfound"}))
    assert charges(key) == 1
    assert entry(key).status == Status.FAILED_FINAL


def test_returned_final_4xx_is_stored_and_replayed(client: Client) -> None:
    key = new_key()
    first = send(client, "post", CHARGES, key, {"amount": 1, "status": 402})
    assert first.status_code == 402
    assert replayed(first, send(client, "post", CHARGES, key, {"amount": 1, "status": 402}))
    assert entry(key).status == Status.FAILED_FINAL


# Authentication, permissions, throttling: answered before the claim, never stored


def test_401_is_not_stored_and_the_key_then_works_once_authenticated(alice: User) -> None:
    key = new_key()
    anonymous = Client(raise_request_exception=False)
    response = send(anonymous, "post", CHARGES, key)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"
    bad_token = Client(raise_request_exception=False, HTTP_AUTHORIZATION="Token nope")
    assert send(bad_token, "post", CHARGES, key).status_code == 401
    assert not IdempotencyEntry.objects.exists()
    first = send(token_client(alice), "post", CHARGES, key)
    assert first.status_code == 201
    assert "Idempotent-Replayed" not in first
    assert charges(key) == 1


@pytest.mark.parametrize(
    ("header", "status"), [("X-Deny", 403), ("X-Throttle", 429)], ids=["403", "429"]
)
def test_permission_and_throttle_refusals_are_not_stored(
    client: Client, header: str, status: int
) -> None:
    key = new_key()
    response = send(client, "post", CHARGES, key, **{header: "yes"})
    assert response.status_code == status
    assert no_entry(key)
    assert send(client, "post", CHARGES, key).status_code == 201


def test_object_permission_refused_inside_the_handler_is_not_stored(client: Client) -> None:
    key = new_key()
    target = ChargeFactory.create(amount=50)
    refused = send(client, "put", _detail(target), key, {"amount": 1}, **{"X-Deny-Object": "yes"})
    assert refused.status_code == 403
    assert no_entry(key)
    assert send(client, "put", _detail(target), key, {"amount": 1}).status_code == 200
    target.refresh_from_db()
    assert target.amount == 1


@pytest.mark.parametrize("failure", ["denied", "django-denied", "unauthenticated"])
def test_refusals_raised_after_writing_roll_back_and_free_the_key(
    client: Client, failure: str
) -> None:
    key = new_key()
    response = send(client, "post", CHARGES, key, {"amount": 1, "fail": failure})
    assert response.status_code in (401, 403)
    assert charges(key) == 0
    assert no_entry(key)


def test_tenants_are_two_token_users(alice: User, bob: User) -> None:
    key = new_key()
    first = send(token_client(alice), "post", CHARGES, key, {"amount": 1})
    other = send(token_client(bob), "post", CHARGES, key, {"amount": 999})
    assert other.status_code == 201
    assert "Idempotent-Replayed" not in other
    assert first.content != other.content
    assert charges(key) == 2
    tenants = set(IdempotencyEntry.objects.values_list("tenant", flat=True))
    assert tenants == {str(alice.pk), str(bob.pk)}


def test_session_auth_with_csrf_enforced_and_a_multipart_body(alice: User) -> None:
    client = Client(enforce_csrf_checks=True, raise_request_exception=False)
    client.force_login(alice)
    secret = get_random_string(32)
    client.cookies["csrftoken"] = secret
    key = new_key()

    def form_post(**headers: str) -> Any:
        headers["Idempotency-Key"] = key
        return client.post(CHARGES, {"amount": "5"}, headers=headers)  # multipart

    assert form_post().status_code == 403  # CSRF refused, not stored
    assert no_entry(key)
    # The CSRF check streams the multipart body before the view runs: the
    # fingerprint must have read it first.
    first = form_post(**{"X-CSRFToken": secret})
    assert first.status_code == 201
    assert entry(key).tenant == str(alice.pk)
    assert replayed(first, form_post(**{"X-CSRFToken": secret}))


# Lifecycle


def test_abandoned_claim_is_taken_over_once_its_lease_has_passed(
    client: Client, alice: User
) -> None:
    key = new_key()
    fingerprint = keyed(
        request_fingerprint(
            RequestFactory().post(CHARGES, json.dumps({"amount": 100}), "application/json")
        )
    ).current
    IdempotencyEntryFactory(
        tenant=str(alice.pk), key=key, fingerprint=fingerprint, in_progress=True
    )
    assert send(client, "post", CHARGES, key).status_code == 409
    IdempotencyEntry.objects.filter(key=key).update(
        locked_until=timezone.now() - timedelta(seconds=1)
    )
    taken = send(client, "post", CHARGES, key)
    assert taken.status_code == 201
    assert replayed(taken, send(client, "post", CHARGES, key))
    assert charges(key) == 1


def test_entry_past_its_ttl_is_treated_as_absent(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = new_key()
    send(client, "post", CHARGES, key)
    IdempotencyEntry.objects.filter(key=key).update(expires_at=Now() - timedelta(seconds=1))
    again = send(client, "post", CHARGES, key, {"amount": 3})
    assert again.status_code == 201
    assert "Idempotent-Replayed" not in again
    assert charges(key) == 2


def test_unreachable_database_is_503_and_the_view_does_not_run() -> None:
    # The webhook view needs no authentication, which would itself need the database.
    client = Client(raise_request_exception=False)
    body = {"event_id": new_key()}
    with unreachable_database():
        response = send(client, "post", "/api/webhook/", None, body)
    assert response.status_code == 503
    assert problem(response)["type"] == PROBLEM_BASE + "unavailable"
    assert charges(body["event_id"]) == 0


# ATOMIC_REQUESTS


@pytest.fixture
def atomic_requests() -> Any:
    connection.settings_dict["ATOMIC_REQUESTS"] = True
    yield
    connection.settings_dict["ATOMIC_REQUESTS"] = False


@pytest.mark.usefixtures("atomic_requests")
def test_atomic_requests_leaves_the_view_to_manage_its_transaction(client: Client) -> None:
    key = new_key()
    assert send(client, "post", CHARGES, key, {"amount": 1, "status": 500}).status_code == 500
    assert charges(key) == 0
    first = send(client, "post", CHARGES, key)
    assert replayed(first, send(client, "post", CHARGES, key))
    assert charges(key) == 1


@pytest.mark.usefixtures("atomic_requests")
def test_atomic_requests_still_stores_a_handled_error(client: Client) -> None:
    # DRF's exception handler marks the request's transaction for rollback; the
    # stored answer must survive it while the handler's own writes roll back.
    key = new_key()
    body = {"amount": 1, "fail": "notfound"}
    first = send(client, "post", CHARGES, key, body)
    assert first.status_code == 404
    assert entry(key).status == Status.FAILED_FINAL
    assert replayed(first, send(client, "post", CHARGES, key, body))
    assert charges(key) == 0


def test_as_view_exempts_the_entries_database_from_atomic_requests() -> None:
    view = api.ChargeViewSet.as_view({"post": "create"})
    assert "default" in view._non_atomic_requests
    assert "other" not in view._non_atomic_requests


# Misconfiguration fails when the URLconf loads


@pytest.mark.parametrize(
    ("attribute", "value", "message"),
    [
        ("idempotency_ttl", "1h", "idempotency_ttl takes seconds"),
        ("idempotency_lease", -1, "idempotency_lease must be positive"),
        ("idempotency_methods", "POST", "idempotency_methods takes a list"),
        ("idempotency_methods", ["GET"], "idempotency_methods can't protect safe"),
        ("idempotency_required", "yes", "idempotency_required must be a bool"),
        ("idempotency_header", 1, "idempotency_header must be a str"),
    ],
)
@pytest.mark.django_db(transaction=False)
def test_wrong_attribute_fails_in_as_view(attribute: str, value: Any, message: str) -> None:
    view: Any = type("Broken", (api.ChargeAPIView,), {attribute: value})
    with pytest.raises(ImproperlyConfigured, match=f"Broken.{message}"):
        view.as_view()


@pytest.mark.django_db(transaction=False)
def test_lease_not_shorter_than_ttl_names_both_attributes_and_their_values() -> None:
    attributes = {"idempotency_ttl": 60, "idempotency_lease": 90}
    view: Any = type("BadLease", (api.ChargeAPIView,), attributes)
    with pytest.raises(ImproperlyConfigured) as error:
        view.as_view()
    assert str(error.value) == (
        "BadLease.idempotency_lease must be shorter than idempotency_ttl; "
        "got 90 seconds and 60 seconds."
    )


def test_mixin_after_the_view_class_is_refused() -> None:
    from rest_framework.views import APIView

    from idempotency_django.rest_framework import IdempotentMixin

    with pytest.raises(ImproperlyConfigured, match="put IdempotentMixin before"):
        type("Backwards", (APIView, IdempotentMixin), {})


@pytest.mark.parametrize("ttl", [0, -5])
def test_non_positive_ttl_hook_is_refused(django_user_model: Any, ttl: int) -> None:
    from rest_framework.test import force_authenticate

    view: Any = type("ZeroTTL", (api.ChargeAPIView,), {"get_idempotency_ttl": lambda self: ttl})
    request = APIRequestFactory().post(
        "/x/", {"amount": 1}, format="json", HTTP_IDEMPOTENCY_KEY=new_key()
    )
    force_authenticate(request, django_user_model.objects.create_user("ttl"))
    with pytest.raises(ValueError, match="must be positive"):
        view.as_view()(request)


# IDEMPOTENCY_DRF_ERROR_FORMAT = "drf"


DRF_FORMAT = override_settings(
    IDEMPOTENCY_DRF_ERROR_FORMAT="drf",
    REST_FRAMEWORK={
        "DEFAULT_AUTHENTICATION_CLASSES": ["rest_framework.authentication.TokenAuthentication"],
        "EXCEPTION_HANDLER": "tests.testapp.api.envelope_exception_handler",
    },
)


def _error(response: Any) -> dict[str, Any]:
    assert response["Content-Type"] == "application/json"
    error: dict[str, Any] = json.loads(response.content)["error"]
    return error


@DRF_FORMAT
def test_drf_format_routes_errors_through_the_exception_handler(client: Client) -> None:
    missing = send(client, "post", CHARGES, None)
    assert (missing.status_code, _error(missing)["code"]) == (400, "idempotency_key_missing")
    malformed = send(client, "post", CHARGES, "a b")
    assert (malformed.status_code, _error(malformed)["code"]) == (400, "idempotency_key_malformed")
    key = new_key()
    send(client, "post", CHARGES, key)
    reused = send(client, "post", CHARGES, key, {"amount": 1})
    assert (reused.status_code, _error(reused)["code"]) == (422, "idempotency_key_reused")


@DRF_FORMAT
def test_drf_format_409_keeps_retry_after_when_the_handler_drops_it(client: Client) -> None:
    key = new_key()
    send(client, "post", CHARGES, key)
    IdempotencyEntry.objects.filter(key=key).update(
        status=Status.IN_PROGRESS, locked_until=timezone.now() + timedelta(seconds=60)
    )
    busy = send(client, "post", CHARGES, key)
    assert (busy.status_code, _error(busy)["code"]) == (409, "idempotency_request_in_progress")
    assert busy["Retry-After"] == "1"


@override_settings(IDEMPOTENCY_DRF_ERROR_FORMAT="drf")
def test_drf_format_with_drfs_own_exception_handler(client: Client) -> None:
    response = send(client, "post", CHARGES, None)
    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert "Idempotency-Key" in json.loads(response.content)["detail"]


def test_to_api_exception_carries_status_code_and_wait() -> None:
    busy = to_api_exception(RequestInProgress(retry_after=4))
    assert isinstance(busy, RequestInProgressError)
    assert (busy.status_code, busy.wait, busy.get_codes()) == (
        409,
        4,
        "idempotency_request_in_progress",
    )

    class Teapot(IdempotencyError):
        status, code = 418, "teapot"

    other = to_api_exception(Teapot("short and stout"))
    assert type(other) is IdempotencyAPIError
    assert (other.status_code, other.wait, str(other.detail)) == (418, None, "short and stout")


# Concurrency


def _one_execution(responses: list[Any]) -> tuple[int, int]:
    """Check one original answer, the rest 409 or its replay; count (409s, replays)."""
    assert not [r for r in responses if isinstance(r, BaseException)], responses
    fresh = [r for r in responses if r.status_code == 201 and "Idempotent-Replayed" not in r]
    assert len(fresh) == 1, [r.status_code for r in responses]
    others = [r for r in responses if r is not fresh[0]]
    conflicts = [r for r in others if r.status_code == 409]
    assert all(int(r["Retry-After"]) >= 1 for r in conflicts)
    replays = [r for r in others if r.status_code != 409]
    assert all(replayed(fresh[0], r) for r in replays)
    return len(conflicts), len(replays)


@pytest.mark.requires_server
def test_storm_through_a_viewset_commits_exactly_one_execution(alice: User) -> None:
    trials, concurrency = 50, 10
    header = f"Token {Token.objects.create(user=alice).key}"
    conflicts = replays = 0
    for trial in range(trials):
        key = f"drf-storm-{trial}-{new_key()}"
        # Half the trials keep the first execution in flight long enough to see 409s.
        body = {"amount": trial, "sleep": 0.01 if trial % 2 else 0}

        def work(_index: int, key: str = key, body: dict[str, Any] = body) -> Any:
            client = Client(raise_request_exception=False, HTTP_AUTHORIZATION=header)
            return send(client, "post", CHARGES, key, body)

        busy, again = _one_execution(race(concurrency, work))
        conflicts, replays = conflicts + busy, replays + again
        assert charges(key) == 1, f"trial {trial}: {charges(key)} executions committed"
    assert conflicts > 0
    assert replays > 0
    print(
        f"\nDRF storm: {trials} trials x {concurrency}: {conflicts} answered 409, {replays} replays"
    )


# Importing and OpenAPI


def _run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.django_db(transaction=False)
def test_importing_the_package_does_not_import_drf() -> None:
    result = _run_python(
        """
        import sys
        sys.modules["rest_framework"] = None  # any import of DRF now fails
        import django
        from django.conf import settings
        settings.configure(
            INSTALLED_APPS=["django.contrib.auth", "django.contrib.contenttypes", "idempotency_django"],
            DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
        )
        django.setup()
        import idempotency_django
        from idempotency_django import idempotent, models
        from idempotency_django._adapters import decorators
        from idempotency_django._protocol import core  # noqa: F401
        from django.core.management import call_command
        call_command("check")
        print("ok")
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("ok")


@pytest.mark.django_db(transaction=False)
def test_the_mixin_works_without_drf_spectacular() -> None:
    result = _run_python(
        """
        import os, sys
        sys.modules["drf_spectacular"] = None
        os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
        import django
        django.setup()
        from idempotency_django.rest_framework import IdempotentMixin  # noqa: F401
        from django.urls import reverse  # noqa: F401
        import tests.testapp.api_urls  # noqa: F401
        assert "idempotency_django._adapters.spectacular" not in sys.modules
        print("ok")
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("ok")


SPECTACULAR = override_settings(
    REST_FRAMEWORK={"DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema"}
)


def _schema(patterns: list[Any] | None = None) -> dict[str, Any]:
    from drf_spectacular.generators import SchemaGenerator

    from tests.testapp import api_urls

    generator = SchemaGenerator(patterns=patterns or api_urls.urlpatterns)
    schema: dict[str, Any] = generator.get_schema(request=None, public=True)
    return schema


def _header(operation: dict[str, Any], name: str = "Idempotency-Key") -> dict[str, Any] | None:
    for parameter in operation.get("parameters", []):
        if parameter["in"] == "header" and parameter["name"] == name:
            return dict(parameter)
    return None


PROBLEM_REF = {"$ref": "#/components/schemas/IdempotencyProblem"}


@SPECTACULAR
@pytest.mark.django_db(transaction=False)
def test_openapi_schema_documents_protected_operations() -> None:
    schema = _schema()
    paths = schema["paths"]
    for url, method in [
        ("/charges/", "post"),
        ("/charges/{id}/", "put"),
        ("/charges/{id}/", "patch"),
        ("/charges/{id}/", "delete"),
        ("/charges/{id}/refund/", "post"),
        ("/apiview/", "post"),
        ("/generic/", "post"),
    ]:
        operation = paths[url][method]
        assert (_header(operation) or {}).get("required") is True, (url, method)
        for code in ("400", "409", "422", "503"):
            content = operation["responses"][code]["content"]
            assert content["application/problem+json"]["schema"] == PROBLEM_REF, (url, code)
        assert "Retry-After" in operation["responses"]["409"]["headers"]
        assert "Retry-After" in operation["responses"]["503"]["headers"]
    assert "IdempotencyProblem" in schema["components"]["schemas"]
    created = paths["/charges/"]["post"]["responses"]["201"]
    assert "Idempotent-Replayed" in created["headers"]
    assert "application/json" in created["content"]


@SPECTACULAR
@pytest.mark.django_db(transaction=False)
def test_openapi_schema_follows_each_views_options() -> None:
    paths = _schema()["paths"]
    for url, method in [("/charges/", "get"), ("/charges/{id}/", "get"), ("/put-only/", "post")]:
        assert _header(paths[url][method]) is None, (url, method)
        assert "409" not in paths[url][method]["responses"]
    assert _header(paths["/put-only/"]["put"]) is not None
    assert (_header(paths["/optional/"]["post"]) or {})["required"] is False
    assert _header(paths["/custom-header/"]["post"], "X-Request-Key") is not None
    webhook = paths["/webhook/"]["post"]
    assert _header(webhook) is None  # its key comes from the body
    assert {"409", "422"} <= set(webhook["responses"])


@override_settings(
    IDEMPOTENCY_DRF_ERROR_FORMAT="drf",
    REST_FRAMEWORK={"DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema"},
)
@pytest.mark.django_db(transaction=False)
def test_openapi_schema_under_the_drf_error_format_leaves_bodies_to_the_handler() -> None:
    operation = _schema()["paths"]["/charges/"]["post"]
    assert "content" not in operation["responses"]["409"]
    assert _header(operation) is not None


@SPECTACULAR
@pytest.mark.django_db(transaction=False)
def test_openapi_composes_with_extend_schema_and_custom_schema_classes() -> None:
    from drf_spectacular.openapi import AutoSchema
    from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema

    class TaggedSchema(AutoSchema):
        def get_tags(self) -> list[str]:
            return ["tagged"]

    class Annotated(api.ChargeAPIView):
        schema = TaggedSchema()

        @extend_schema(summary="Take a payment", responses={201: api.ChargeSerializer})
        def post(self, request: Any) -> Any:
            return super().post(request)

    @extend_schema(responses={400: OpenApiResponse(description="Bad amount")})
    class WithOwn400(api.ChargeAPIView):
        pass

    own_header = OpenApiParameter(
        "Idempotency-Key", str, OpenApiParameter.HEADER, description="Ours"
    )

    @extend_schema(parameters=[own_header])
    class WithOwnHeader(api.ChargeAPIView):
        @extend_schema(exclude=True)
        def put(self, request: Any) -> Any:
            return super().put(request)

    patterns: list[URLPattern] = [
        path("annotated/", Annotated.as_view()),
        path("own-400/", WithOwn400.as_view()),
        path("own-header/", WithOwnHeader.as_view()),
    ]
    paths = _schema(patterns)["paths"]
    annotated = paths["/annotated/"]["post"]
    assert (annotated["summary"], annotated["tags"]) == ("Take a payment", ["tagged"])
    assert _header(annotated) is not None
    assert "409" in annotated["responses"]
    own = paths["/own-400/"]["post"]["responses"]["400"]
    assert own["description"] == "Bad amount"
    assert own["content"]["application/problem+json"]["schema"] == PROBLEM_REF
    assert set(paths["/own-header/"]) == {"get", "post"}  # put excluded
    headers = [p for p in paths["/own-header/"]["post"]["parameters"] if p["in"] == "header"]
    assert [p["description"] for p in headers] == ["Ours"]


def test_document_operation_leaves_other_views_alone() -> None:
    from drf_spectacular.plumbing import ComponentRegistry

    from idempotency_django._adapters.spectacular import document_operation

    operation: dict[str, Any] = {"responses": {"201": {"description": "Created"}}}
    document_operation(operation, APIView(), "POST", ComponentRegistry())
    assert operation == {"responses": {"201": {"description": "Created"}}}
