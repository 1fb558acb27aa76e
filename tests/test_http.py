"""One test (or more) per row of SPEC's HTTP table, through ``@idempotent``.

Runs on SQLite and, in the PostgreSQL pass, on PostgreSQL. ``transaction=True``
so that the claim commits on its own, as in production.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.db.models.functions import Now
from django.test import Client, RequestFactory, override_settings
from django.utils import timezone

from idempotency_django import idempotent
from idempotency_django.exceptions import PROBLEM_BASE
from idempotency_django.models import IdempotencyEntry
from tests.factories import IdempotencyEntryFactory
from tests.helpers import charges, new_key, post, problem, stored_answer, unreachable_database

pytestmark = [pytest.mark.versions, pytest.mark.django_db(transaction=True)]
Status = IdempotencyEntry.Status


@pytest.fixture
def client() -> Client:
    return Client(raise_request_exception=False)


def test_safe_methods_pass_through_untouched(client: Client) -> None:
    response = client.get("/charges/cbv/")
    assert response.status_code == 200
    assert "Idempotent-Replayed" not in response
    assert not IdempotencyEntry.objects.exists()


def test_unprotected_method_ignores_the_header(client: Client) -> None:
    key = new_key()
    first, second = post(client, "/charges/put-only/", key), post(client, "/charges/put-only/", key)
    assert (first.status_code, second.status_code) == (201, 201)
    assert charges("") == 2
    assert not IdempotencyEntry.objects.exists()


def test_missing_key_is_400_problem(client: Client) -> None:
    response = post(client, "/charges/", None)
    assert response.status_code == 400
    assert problem(response)["type"] == PROBLEM_BASE + "key-missing"
    assert all_charges() == 0
    assert not IdempotencyEntry.objects.exists()


def test_missing_key_runs_unprotected_when_optional(client: Client) -> None:
    assert post(client, "/charges/optional/", None).status_code == 201
    assert post(client, "/charges/optional/", None).status_code == 201
    assert all_charges() == 2


@override_settings(IDEMPOTENCY_REQUIRED=False)
def test_required_setting_false_makes_the_key_optional(client: Client) -> None:
    assert post(client, "/charges/", None).status_code == 201


@pytest.mark.parametrize(
    "raw",
    ["", " ", "a b", "caf\u00e9", "a\x01b", "x" * 256, '"unterminated', '"bad\\escape"', '""'],
)
def test_malformed_key_is_400_problem(client: Client, raw: str) -> None:
    response = post(client, "/charges/", raw)
    assert response.status_code == 400
    assert problem(response)["type"] == PROBLEM_BASE + "key-malformed"
    assert all_charges() == 0
    assert not IdempotencyEntry.objects.exists()


@override_settings(IDEMPOTENCY_KEY_MAX_LENGTH=8)
def test_key_max_length_setting(client: Client) -> None:
    assert post(client, "/charges/", "123456789").status_code == 400
    assert post(client, "/charges/", "12345678").status_code == 201


def test_quoted_structured_field_string_means_its_content(client: Client) -> None:
    first = post(client, "/charges/", '"abc"')
    again = post(client, "/charges/", "abc")
    assert first.status_code == 201
    assert again["Idempotent-Replayed"] == "true"
    assert charges("abc") == 1


def test_first_request_runs_once_and_is_stored(client: Client) -> None:
    key = new_key()
    response = post(client, "/charges/", key)
    assert response.status_code == 201
    assert "Idempotent-Replayed" not in response
    assert charges(key) == 1
    entry = IdempotencyEntry.objects.get(key=key)
    assert entry.status == Status.COMPLETED
    assert entry.response_body is not None
    assert stored_answer(entry).body == response.content
    assert len(entry.fingerprint) == 64
    assert b"amount" not in entry.fingerprint.encode()


def test_replay_is_byte_identical_with_stored_headers(client: Client) -> None:
    key = new_key()
    first = post(client, "/charges/", key)
    replay = post(client, "/charges/", key)
    assert replay.status_code == first.status_code == 201
    assert replay.content == first.content
    for header in ("Content-Type", "Location", "X-Charge-Id"):
        assert replay[header] == first[header]
    assert replay["Idempotent-Replayed"] == "true"
    assert "session-ish" in first.cookies
    assert "session-ish" not in replay.cookies
    assert charges(key) == 1


def test_replay_of_binary_body_is_exact(client: Client) -> None:
    key = new_key()
    first = post(client, "/binary/", key)
    replay = post(client, "/binary/", key)
    assert replay.content == first.content == bytes(range(256)) * 4
    assert replay["Content-Type"] == "application/octet-stream"
    assert charges(key) == 1


def test_json_key_order_and_spacing_do_not_change_the_fingerprint(client: Client) -> None:
    key = new_key()
    headers = {"Idempotency-Key": key}
    client.post(
        "/charges/", '{"amount": 7, "note": "x"}', content_type="application/json", headers=headers
    )
    replay = client.post(
        "/charges/", '{ "note":"x",\n"amount":7 }', content_type="application/json", headers=headers
    )
    assert replay["Idempotent-Replayed"] == "true"
    assert charges(key) == 1


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("post", "/charges/", {"amount": 101}),
        ("post", "/charges/?currency=eur", {"amount": 100}),
        ("post", "/charges/optional/", {"amount": 100}),
        ("put", "/charges/", {"amount": 100}),
    ],
    ids=["body", "query", "path", "method"],
)
def test_reuse_with_another_request_is_422_and_reveals_nothing(
    client: Client, method: str, path: str, body: dict[str, int]
) -> None:
    key = new_key()
    first = post(client, "/charges/", key, {"amount": 100})
    response = getattr(client, method)(
        path, json.dumps(body), content_type="application/json", headers={"Idempotency-Key": key}
    )
    assert response.status_code == 422
    assert problem(response)["type"] == PROBLEM_BASE + "key-reused"
    assert first.content not in response.content
    assert charges(key) == 1


def test_in_flight_duplicate_is_409_with_retry_after(client: Client) -> None:
    key = new_key()
    first = post(client, "/charges/", key)
    IdempotencyEntry.objects.filter(key=key).update(
        status=Status.IN_PROGRESS, locked_until=timezone.now() + timedelta(seconds=60)
    )
    response = post(client, "/charges/", key)
    assert response.status_code == 409
    assert int(response["Retry-After"]) >= 1
    assert problem(response)["type"] == PROBLEM_BASE + "in-progress"
    assert first.content not in response.content
    assert charges(key) == 1


@pytest.mark.parametrize("status", [500, 502, 503, 408, 409, 425, 429])
def test_transient_answer_rolls_back_and_frees_the_key(client: Client, status: int) -> None:
    key = new_key()
    response = post(client, "/charges/", key, {"status": status})
    assert response.status_code == status
    assert charges(key) == 0
    assert not IdempotencyEntry.objects.filter(key=key).exists()
    retry = post(client, "/charges/", key, {"status": status})
    assert "Idempotent-Replayed" not in retry


def test_exception_rolls_back_and_frees_the_key(client: Client) -> None:
    key = new_key()
    assert post(client, "/charges/", key, {"raise": True}).status_code == 500
    assert charges(key) == 0
    assert not IdempotencyEntry.objects.filter(key=key).exists()


def test_retry_after_a_5xx_runs_afresh(client: Client) -> None:
    key = new_key()
    post(client, "/charges/", key, {"status": 500})
    # A different body would be 422 if the 500 had been stored.
    assert post(client, "/charges/", key, {"amount": 5}).status_code == 201
    assert charges(key) == 1


@pytest.mark.parametrize("status", [400, 402, 404, 410, 422])
def test_final_4xx_is_committed_stored_and_replayed(client: Client, status: int) -> None:
    key = new_key()
    first = post(client, "/charges/", key, {"status": status})
    replay = post(client, "/charges/", key, {"status": status})
    assert first.status_code == replay.status_code == status
    assert replay.content == first.content
    assert replay["Idempotent-Replayed"] == "true"
    assert charges(key) == 1
    assert IdempotencyEntry.objects.get(key=key).status == Status.FAILED_FINAL


def test_abandoned_claim_is_taken_over_once_its_lease_has_passed(client: Client) -> None:
    key = new_key()
    post(client, "/charges/", key, {"status": 503})  # learn nothing; key is free
    entry_fp = _fingerprint_of(client, key)
    IdempotencyEntryFactory(key=key, fingerprint=entry_fp, in_progress=True)
    assert post(client, "/charges/", key).status_code == 409
    IdempotencyEntry.objects.filter(key=key).update(
        locked_until=timezone.now() - timedelta(seconds=1)
    )
    taken = post(client, "/charges/", key)
    assert taken.status_code == 201
    assert post(client, "/charges/", key)["Idempotent-Replayed"] == "true"
    assert charges(key) == 1


def test_abandoned_claim_with_another_payload_is_treated_as_absent(client: Client) -> None:
    key = new_key()
    IdempotencyEntryFactory(key=key, abandoned=True)
    assert post(client, "/charges/", key).status_code == 201
    assert charges(key) == 1


def test_entry_past_its_ttl_is_treated_as_absent(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = new_key()
    post(client, "/charges/", key)
    IdempotencyEntry.objects.filter(key=key).update(expires_at=Now() - timedelta(seconds=1))
    again = post(client, "/charges/", key, {"amount": 3})
    assert again.status_code == 201
    assert "Idempotent-Replayed" not in again
    assert charges(key) == 2
    assert IdempotencyEntry.objects.get(key=key).expires_at > timezone.now()


@override_settings(IDEMPOTENCY_TTL=60)
def test_ttl_setting_sets_expiry(client: Client) -> None:
    key = new_key()
    post(client, "/charges/", key)
    entry = IdempotencyEntry.objects.get(key=key)
    assert timedelta(seconds=55) < entry.expires_at - timezone.now() <= timedelta(seconds=60)


def test_tenants_are_isolated(client: Client) -> None:
    key = new_key()
    alice = User.objects.create_user("alice", password="pw")
    bob = User.objects.create_user("bob", password="pw")
    client.force_login(alice)
    first = post(client, "/charges/", key)
    client.force_login(bob)
    other = post(client, "/charges/", key, {"amount": 999})
    assert other.status_code == 201
    assert "Idempotent-Replayed" not in other
    assert json.loads(other.content)["tenant"] == str(bob.pk)
    assert first.content != other.content
    assert charges(key) == 2
    assert set(IdempotencyEntry.objects.values_list("tenant", flat=True)) == {
        str(alice.pk),
        str(bob.pk),
    }


def test_unreachable_database_is_503_and_the_view_does_not_run(client: Client) -> None:
    key = new_key()
    with unreachable_database():
        response = post(client, "/charges/", key)
    assert response.status_code == 503
    assert problem(response)["type"] == PROBLEM_BASE + "unavailable"
    assert charges(key) == 0
    assert post(client, "/charges/", key).status_code == 201


def test_unreachable_database_with_a_session_is_503_too(client: Client) -> None:
    client.force_login(User.objects.create_user("carol", password="pw"))
    key = new_key()
    with unreachable_database():
        response = post(client, "/charges/", key)
    assert response.status_code == 503
    assert charges(key) == 0


def test_multipart_retry_with_a_new_boundary_is_a_replay(client: Client) -> None:
    from django.test.client import encode_multipart

    key = new_key()
    data = {"amount": "100", "note": "x"}
    first, second = (
        client.post(
            "/charges/",
            encode_multipart(boundary, data),
            content_type=f"multipart/form-data; boundary={boundary}",
            headers={"Idempotency-Key": key},
        )
        for boundary in ("BoUnDaRy-one", "another-BOUNDARY")
    )
    assert first.status_code == 201
    assert second["Idempotent-Replayed"] == "true"
    changed = client.post(
        "/charges/", {"amount": "101", "note": "x"}, headers={"Idempotency-Key": key}
    )
    assert changed.status_code == 422


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=10_000)
def test_large_multipart_upload_is_protected_not_refused(client: Client) -> None:
    from django.core.files.uploadedfile import SimpleUploadedFile

    key = new_key()
    upload = SimpleUploadedFile("scan.pdf", b"%PDF" + bytes(50_000))
    first = client.post(
        "/charges/", {"amount": "1", "file": upload}, headers={"Idempotency-Key": key}
    )
    upload.seek(0)
    again = client.post(
        "/charges/", {"amount": "1", "file": upload}, headers={"Idempotency-Key": key}
    )
    assert first.status_code == 201
    assert again["Idempotent-Replayed"] == "true"
    assert charges(key) == 1


@override_settings(IDEMPOTENCY_CACHE="unreachable")
def test_unreachable_replay_cache_falls_back_to_the_database(
    client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    caches_setting = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "unreachable": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",
            "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 0.2, "SOCKET_TIMEOUT": 0.2},
        },
    }
    key = new_key()
    with override_settings(CACHES=caches_setting):
        first = post(client, "/charges/", key)
        replay = post(client, "/charges/", key)
    assert replay.content == first.content
    assert replay["Idempotent-Replayed"] == "true"
    assert "unreachable" in caplog.text
    assert charges(key) == 1


def test_class_based_view_through_method_decorator(client: Client) -> None:
    key = new_key()
    first = post(client, "/charges/cbv/", key)
    replay = post(client, "/charges/cbv/", key)
    assert first.status_code == 201
    assert replay.content == first.content
    assert charges(key) == 1


def test_async_view(client: Client) -> None:
    key = new_key()
    first = post(client, "/charges/async/", key)
    replay = post(client, "/charges/async/", key)
    assert first.status_code == 201
    assert replay["Idempotent-Replayed"] == "true"
    assert charges(key) == 1


def test_key_extractor_and_tenant_option(client: Client) -> None:
    body = {"event_id": "evt_1", "type": "charge.succeeded"}
    first = post(client, "/webhooks/", None, body)
    again = post(client, "/webhooks/", None, body)
    assert first.status_code == again.status_code == 204
    assert again["Idempotent-Replayed"] == "true"
    assert IdempotencyEntry.objects.get().tenant == "stripe"
    assert charges("evt_1") == 1


def test_derive_gives_stable_distinct_keys(client: Client) -> None:
    key = new_key()
    first = json.loads(post(client, "/derive/", key).content)
    replay = post(client, "/derive/", key)
    other = json.loads(post(client, "/derive/", new_key()).content)
    assert json.loads(replay.content) == first
    assert first["payments"] != first["email"]
    assert first["payments"] != other["payments"]
    assert key not in first["payments"]


def test_atomic_requests_still_answers_409_to_in_flight_duplicates(client: Client) -> None:
    key = new_key()
    connection.settings_dict["ATOMIC_REQUESTS"] = True
    try:
        assert post(client, "/charges/", key, {"status": 500}).status_code == 500
        assert charges(key) == 0
        assert post(client, "/charges/", key).status_code == 201
        assert post(client, "/charges/", key)["Idempotent-Replayed"] == "true"
    finally:
        connection.settings_dict["ATOMIC_REQUESTS"] = False
    assert charges(key) == 1


def all_charges() -> int:
    from tests.testapp.models import Charge

    return Charge.objects.count()


def _fingerprint_of(client: Client, key: str) -> str:
    from django.test import RequestFactory

    from idempotency_django._protocol.fingerprint import keyed, request_fingerprint

    request = RequestFactory().post(
        "/charges/", json.dumps({"amount": 100}), content_type="application/json"
    )
    return keyed(request_fingerprint(request)).current


def test_cache_never_outlives_the_entry(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """A slow on_commit hook of the view's runs before ours: the time left is measured then."""
    from django.db import transaction

    from idempotency_django._protocol import execution
    from tests.testapp import views

    clock = [1000.0]
    fake_time = SimpleNamespace(monotonic=lambda: clock[0], sleep=time.sleep)
    monkeypatch.setattr(execution, "time", fake_time)

    def slow_hooks(request: Any) -> Any:
        transaction.on_commit(lambda: clock.__setitem__(0, clock[0] + 61))
        return views.make_charge(request)

    caches_setting = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "local": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "t"},
    }
    key = new_key()
    protected = idempotent(ttl=60, lease=5)(slow_hooks)
    with override_settings(CACHES=caches_setting, IDEMPOTENCY_CACHE="local"):
        from django.core.cache import caches

        from idempotency_django._storage.cache import cache_key

        request = RequestFactory().post(
            "/charges/", "{}", content_type="application/json", headers={"Idempotency-Key": key}
        )
        assert protected(request).status_code == 201
        assert caches["local"].get(cache_key("default", "", key)) is None
