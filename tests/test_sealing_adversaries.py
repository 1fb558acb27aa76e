"""The stored answers' adversaries, one test (or two) each: docs/security.rst's table.

Each test says who the adversary is and what they hold, then proves what they do not
get. "Another database" is played by giving the entries database a new identity (as a
second database, created on its own, has): the rows, keys and tenants stay the same,
which is exactly what a copied row or a second deployment's database looks like.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import logging
import os
import pickle
import struct
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from django.core.cache import caches
from django.core.management import call_command
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.test import Client, override_settings
from django.urls import path
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from idempotency_django import idempotent
from idempotency_django._protocol.redact import MARKER, REDACTED_HEADER
from idempotency_django._protocol.responses import StoredResponse
from idempotency_django._storage import seal, secret
from idempotency_django.models import IdempotencyDatabase, IdempotencyEntry
from idempotency_django.rest_framework import IdempotentMixin
from tests.helpers import charges, new_key, post, problem, stored_answer
from tests.testapp.models import Charge

pytestmark = [pytest.mark.django_db(transaction=True)]
TOKEN = "tok_live_adversary_9"
# A project of the attacker's own, pointed at a backup: everything but the settings.
ATTACKER = {"SECRET_KEY": "the attacker's own project", "SECRET_KEY_FALLBACKS": []}
OLD = {"SECRET_KEY": "the key before the rotation", "SECRET_KEY_FALLBACKS": []}
NEW = {"SECRET_KEY": "the key after the rotation", "SECRET_KEY_FALLBACKS": [OLD["SECRET_KEY"]]}


def minted(request: HttpRequest) -> dict[str, Any]:
    key = request.idempotency.key  # type: ignore[attr-defined]
    return {"id": Charge.objects.create(reference=key, amount=1).pk, "token": TOKEN}


@idempotent
def mint(request: HttpRequest) -> HttpResponse:
    return JsonResponse(minted(request), status=201)


@idempotent
def decline(request: HttpRequest) -> HttpResponse:
    minted(request)
    return JsonResponse({"declined": True}, status=402, reason="Card Declined")


def blank_in_place(response: HttpResponse) -> HttpResponse:
    """A redactor that edits the response it is given and returns it (not a new one)."""
    data = json.loads(response.content)
    data["token"] = MARKER
    response.content = json.dumps(data).encode()
    return response


@idempotent(redact=blank_in_place)
def mint_blanked_in_place(request: HttpRequest) -> HttpResponse:
    return JsonResponse(minted(request), status=201)


@idempotent(redact=["token"])
def mint_html(request: HttpRequest) -> HttpResponse:
    return HttpResponse(f"<p>Your token: {minted(request)['token']}</p>", status=201)


class MintView(IdempotentMixin, APIView):
    authentication_classes = ()
    permission_classes = ()
    idempotency_redact: ClassVar[list[str]] = ["token"]

    def post(self, request: Request) -> Response:
        return Response(minted(request), status=201)


urlpatterns = [
    path("mint/", mint),
    path("decline/", decline),
    path("blanked/", mint_blanked_in_place),
    path("html/", mint_html),
    path("drf/", MintView.as_view()),
]


@pytest.fixture(autouse=True)
def urls() -> Iterator[None]:
    with override_settings(ROOT_URLCONF=__name__):
        yield


@pytest.fixture
def client() -> Client:
    return Client(raise_request_exception=False)


def as_another_database() -> None:
    """From here on the entries database is another one: same rows, its own identity."""
    IdempotencyDatabase.objects.all().delete()
    secret._cache.clear()


@pytest.fixture(autouse=True)
def same_database_after() -> Iterator[None]:
    """The identity is back as it was after each test (other processes may hold it)."""
    identity = secret.database_identity("default")
    yield
    IdempotencyDatabase.objects.update_or_create(pk=1, defaults={"identity": identity.hex()})
    secret._cache.clear()


def unreadable(response: Any) -> bool:
    kind = str(problem(response)["type"]) if response.status_code == 500 else ""
    return kind.endswith("#answer-unreadable")


# -- someone holding a backup, a dump or a replica of the entries database ---------------


def test_a_backup_reader_opens_no_stored_answer(client: Client) -> None:
    """They hold every table (the secret's and the database identity's too), not the
    settings: the library itself, run with their own settings, opens nothing. A replica
    reader holds the same."""
    key = new_key()
    assert post(client, "/mint/", key).status_code == 201
    entry = IdempotencyEntry.objects.get(key=key)
    with override_settings(**ATTACKER), pytest.raises(seal.Unreadable):
        seal.answer_of("default", entry)
    assert stored_answer(entry).body  # the project's own settings still open it


def test_a_secret_key_rotation_keeps_stored_answers_readable(client: Client) -> None:
    """Opened with the fallbacks' keys; ``reseal_idempotency`` moves them to the new one."""
    key = new_key()
    with override_settings(**OLD):
        first = post(client, "/mint/", key)
    with override_settings(**NEW):
        assert post(client, "/mint/", key).content == first.content
        call_command("reseal_idempotency", stdout=io.StringIO())
    entry = IdempotencyEntry.objects.get(key=key)
    with override_settings(**{**NEW, "SECRET_KEY_FALLBACKS": []}):
        assert TOKEN.encode() in stored_answer(entry).body  # resealed under the new key
    assert charges(key) == 1


def test_a_fallback_dropped_before_its_answers_were_resealed_leaves_them_unreadable(
    client: Client,
) -> None:
    """As fingerprints (a retry is answered 422 then, nothing runs twice)."""
    key = new_key()
    with override_settings(**OLD):
        post(client, "/mint/", key)
    entry = IdempotencyEntry.objects.get(key=key)
    dropped = override_settings(**{**NEW, "SECRET_KEY_FALLBACKS": []})
    with dropped, pytest.raises(seal.Unreadable, match="no longer configured"):
        seal.answer_of("default", entry)


def test_with_idempotency_secret_set_it_is_the_root_and_secret_key_is_not(
    client: Client,
) -> None:
    key, own = new_key(), {"IDEMPOTENCY_SECRET": "an own secret of 32 characters or more"}
    with override_settings(**OLD, **own):
        post(client, "/mint/", key)
    entry = IdempotencyEntry.objects.get(key=key)
    with override_settings(**ATTACKER, **own):
        assert TOKEN.encode() in stored_answer(entry).body
    with override_settings(**OLD), pytest.raises(seal.Unreadable):
        seal.answer_of("default", entry)


def test_moving_from_secret_key_to_idempotency_secret_keeps_answers_with_a_fallback(
    client: Client,
) -> None:
    """The old ``SECRET_KEY`` named in ``IDEMPOTENCY_SECRET_FALLBACKS`` still opens (0.5:
    nothing could name it, every answer was unreadable until its TTL); reseal moves them."""
    key, own = new_key(), {"IDEMPOTENCY_SECRET": "an own secret of 32 characters or more"}
    with override_settings(**OLD):
        first = post(client, "/mint/", key)
    moved = {**OLD, **own, "IDEMPOTENCY_SECRET_FALLBACKS": [OLD["SECRET_KEY"]]}
    with override_settings(**moved):
        assert post(client, "/mint/", key).content == first.content
        call_command("reseal_idempotency", stdout=io.StringIO())
    with override_settings(**OLD, **own):  # the fallback gone: resealed under the new root
        assert post(client, "/mint/", key).content == first.content
    assert charges(key) == 1


def test_moving_to_idempotency_secret_without_a_fallback_leaves_answers_unreadable(
    client: Client,
) -> None:
    """What the fallback is for: never a re-run, an ``answer-unreadable`` until the TTL."""
    key, own = new_key(), {"IDEMPOTENCY_SECRET": "an own secret of 32 characters or more"}
    with override_settings(**OLD):
        post(client, "/mint/", key)
    with override_settings(**OLD, **own):
        assert unreadable(post(client, "/mint/", key))
    assert charges(key) == 1


# 0.4.3's seal, as it was: its key derived from the persisted secret row.
def sealed_as_0_4_3(tenant: str, key: str, answer: StoredResponse) -> bytes:
    derived = hmac.new(secret.server_secret("default"), b"idempotency_django.seal", "sha256")
    cipher_key = derived.digest()
    key_id = hashlib.sha256(b"idempotency_django.seal.id" + cipher_key).digest()[:4]
    aad = struct.pack(">I", len(tenant.encode())) + tenant.encode() + key.encode()
    headers = json.dumps(answer.headers).encode()
    plain = struct.pack(">I", len(headers)) + headers + answer.body
    nonce = os.urandom(12)
    return b"\x01" + key_id + nonce + AESGCM(cipher_key).encrypt(nonce, plain, aad)


@override_settings(IDEMPOTENCY_OPEN_LEGACY_ROWS=True)
def test_an_answer_sealed_by_0_4_3_still_replays_in_the_upgrade_window(client: Client) -> None:
    key = new_key()
    first = post(client, "/mint/", key)
    entry = IdempotencyEntry.objects.get(key=key)
    old = sealed_as_0_4_3("", key, stored_answer(entry))
    IdempotencyEntry.objects.filter(pk=entry.pk).update(response_body=old)
    replay = post(client, "/mint/", key)
    assert replay.content == first.content
    assert replay["Idempotent-Replayed"] == "true"


def test_an_answer_sealed_by_0_4_3_is_unreadable_outside_the_upgrade_window(
    client: Client,
) -> None:
    key = new_key()
    post(client, "/mint/", key)
    entry = IdempotencyEntry.objects.get(key=key)
    old = sealed_as_0_4_3("", key, stored_answer(entry))
    IdempotencyEntry.objects.filter(pk=entry.pk).update(response_body=old)
    assert unreadable(post(client, "/mint/", key))
    assert charges(key) == 1  # never run again


def test_reseal_takes_a_0_4_3_answer_out_of_a_backup_readers_reach(client: Client) -> None:
    key = new_key()
    post(client, "/mint/", key)
    entry = IdempotencyEntry.objects.get(key=key)
    answer = stored_answer(entry)
    IdempotencyEntry.objects.filter(pk=entry.pk).update(
        response_body=sealed_as_0_4_3("", key, answer)
    )
    entry.refresh_from_db()
    with override_settings(**ATTACKER):
        assert seal.answer_of("default", entry) == answer  # the residual risk, documented
    with override_settings(IDEMPOTENCY_OPEN_LEGACY_ROWS=True):  # replays believe it: so may reseal
        call_command("reseal_idempotency", stdout=io.StringIO())
    entry.refresh_from_db()
    with override_settings(**ATTACKER), pytest.raises(seal.Unreadable):
        seal.answer_of("default", entry)
    assert stored_answer(entry) == answer


# -- someone who can write to the entries table -------------------------------------------


def test_a_row_copied_into_another_database_does_not_open(client: Client) -> None:
    key = new_key()
    post(client, "/mint/", key)
    as_another_database()  # customer A's row, now in customer B's database
    response = post(client, "/mint/", key)
    assert unreadable(response)
    assert TOKEN.encode() not in response.content
    assert charges(key) == 1


PAID = b'{"paid": true, "forged": "by a table writer"}'


def forge_as_0_4(key: str) -> None:
    """A table writer's forgery: 0.4's key is derived from a row of the same database."""
    answer = StoredResponse(201, [("Content-Type", "application/json")], PAID, "Created")
    blob = sealed_as_0_4_3("", key, answer)
    IdempotencyEntry.objects.filter(key=key).update(
        response_status=201, response_reason="Created", response_body=blob
    )


def plant_as_0_3(key: str) -> None:
    """A table writer's plant: 0.3's row form, headers a JSON list and the body in clear."""
    IdempotencyEntry.objects.filter(key=key).update(
        response_status=201,
        response_reason="Created",
        response_headers=[["Content-Type", "application/json"]],
        response_body=PAID,
    )


@pytest.mark.parametrize("plant", [forge_as_0_4, plant_as_0_3])
def test_a_table_writer_cannot_plant_a_legacy_answer_even_after_reseal(
    client: Client, plant: Any
) -> None:
    key = new_key()
    assert post(client, "/decline/", key).status_code == 402
    call_command("reseal_idempotency", stdout=io.StringIO())  # the upgrade is done
    plant(key)
    response = post(client, "/decline/", key)
    assert unreadable(response)
    assert PAID not in response.content
    assert charges(key) == 1


@override_settings(IDEMPOTENCY_OPEN_LEGACY_ROWS=True)
@pytest.mark.parametrize("plant", [forge_as_0_4, plant_as_0_3])
def test_the_upgrade_window_believes_a_table_writers_legacy_answer(
    client: Client, plant: Any
) -> None:
    """The trade-off IDEMPOTENCY_OPEN_LEGACY_ROWS documents: keep the window short."""
    key = new_key()
    assert post(client, "/decline/", key).status_code == 402
    plant(key)
    response = post(client, "/decline/", key)
    assert (response.status_code, response.content) == (201, PAID)
    assert charges(key) == 1


@pytest.mark.parametrize("plant", [forge_as_0_4, plant_as_0_3])
def test_reseal_never_launders_a_legacy_answer_planted_before_it(
    client: Client, plant: Any
) -> None:
    """0.5's reseal opened legacy rows whatever the setting and sealed a table writer's
    plant as a genuine answer: it opens what a replay opens, nothing more."""
    key = new_key()
    assert post(client, "/decline/", key).status_code == 402
    plant(key)
    out = io.StringIO()
    call_command("reseal_idempotency", stdout=out)  # the key-rotation runbook's routine
    assert "0 resealed" in out.getvalue()
    assert "1 unreadable" in out.getvalue()
    response = post(client, "/decline/", key)
    assert unreadable(response)
    assert PAID not in response.content
    assert charges(key) == 1


@override_settings(IDEMPOTENCY_OPEN_LEGACY_ROWS=True)
@pytest.mark.parametrize("plant", [forge_as_0_4, plant_as_0_3])
def test_reseal_moves_a_legacy_answer_to_the_current_seal_in_the_upgrade_window(
    client: Client, plant: Any
) -> None:
    """In the window a replay believes it, and so does reseal: after it the window may close."""
    key = new_key()
    assert post(client, "/decline/", key).status_code == 402
    plant(key)  # as 0.4 or 0.3 left it, before the upgrade
    out = io.StringIO()
    call_command("reseal_idempotency", stdout=out)
    assert "1 resealed" in out.getvalue()
    entry = IdempotencyEntry.objects.get(key=key)
    assert bytes(entry.response_body or b"")[:1] == seal.VERSION
    with override_settings(IDEMPOTENCY_OPEN_LEGACY_ROWS=False):
        response = post(client, "/decline/", key)
    assert (response.status_code, response.content) == (201, PAID)
    assert response["Idempotent-Replayed"] == "true"


def test_an_edited_status_code_does_not_open(client: Client) -> None:
    key = new_key()
    assert post(client, "/decline/", key).status_code == 402
    IdempotencyEntry.objects.filter(key=key).update(response_status=201, response_reason="")
    assert unreadable(post(client, "/decline/", key))
    IdempotencyEntry.objects.filter(key=key).update(response_status=402, response_reason="OK")
    assert unreadable(post(client, "/decline/", key))
    assert charges(key) == 1


# -- a co-tenant of the replay cache's Redis: reads, lists, writes -------------------------


MARKS: list[str] = []


def leave_mark(note: str) -> None:
    MARKS.append(note)


class Planted:
    """A value whose unpickling runs code: here, it only leaves a mark."""

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (leave_mark, ("code ran in the app server",))


@pytest.fixture
def redis(redis_url: str) -> Iterator[Any]:
    """The replay cache's raw Redis; the names a test added are deleted after it."""
    backend = caches["replay"]
    raw = backend.client.get_client()  # type: ignore[attr-defined]
    before = set(raw.scan_iter(match="*idempotency:*"))
    with override_settings(IDEMPOTENCY_CACHE="replay", IDEMPOTENCY_TTL=300):
        yield raw
    added = set(raw.scan_iter(match="*idempotency:*")) - before
    if added:
        raw.delete(*added)


def names_added(redis: Any, before: set[bytes]) -> list[bytes]:
    return sorted(set(redis.scan_iter(match="*idempotency:*")) - before)


@pytest.mark.requires_redis
def test_a_cache_co_tenant_lists_names_and_values_that_say_nothing(
    client: Client, redis: Any
) -> None:
    before, key = set(redis.scan_iter(match="*idempotency:*")), new_key()
    post(client, "/mint/", key)
    post(client, "/mint/", key)  # from the database: fills the cache
    (name,) = names_added(redis, before)
    assert key.encode() not in name
    assert TOKEN.encode() not in redis.get(name)


@pytest.mark.requires_redis
def test_a_planted_pickle_is_never_unpickled_and_the_database_answers(
    client: Client, redis: Any, caplog: pytest.LogCaptureFixture
) -> None:
    before, key = set(redis.scan_iter(match="*idempotency:*")), new_key()
    first = post(client, "/mint/", key)
    post(client, "/mint/", key)
    (name,) = names_added(redis, before)
    redis.set(name, pickle.dumps(Planted()), px=60_000)
    MARKS.clear()
    with caplog.at_level(logging.WARNING, logger="idempotency_django"):
        replay = post(client, "/mint/", key)
    assert MARKS == []
    assert replay.content == first.content
    assert replay["Idempotent-Replayed"] == "true"
    assert "cache value" in caplog.text
    assert charges(key) == 1


@pytest.mark.requires_redis
def test_a_cache_value_moved_onto_another_name_is_a_miss_not_a_refusal(
    client: Client, redis: Any
) -> None:
    before, victim = set(redis.scan_iter(match="*idempotency:*")), new_key()
    first = post(client, "/mint/", victim, {"amount": 1})
    post(client, "/mint/", victim, {"amount": 1})
    (victims,) = names_added(redis, before)
    other = new_key()
    post(client, "/mint/", other, {"amount": 2})
    post(client, "/mint/", other, {"amount": 2})
    (others,) = names_added(redis, before | {victims})
    redis.set(victims, redis.get(others), px=60_000)  # another request's value: a 422 bait
    replay = post(client, "/mint/", victim, {"amount": 1})
    assert replay.status_code == 201
    assert replay.content == first.content


@pytest.mark.requires_redis
def test_another_deployment_sharing_secret_key_and_redis_never_gets_a_cached_answer(
    client: Client, redis: Any
) -> None:
    """One image per customer: the same SECRET_KEY, one Redis, each its own database."""
    key = new_key()
    assert post(client, "/mint/", key).status_code == 201
    assert post(client, "/mint/", key)["Idempotent-Replayed"] == "true"  # cached now
    IdempotencyEntry.objects.all().delete()  # deployment B's database: none of A's entries
    as_another_database()
    second = post(client, "/mint/", key)
    assert second.status_code == 201
    assert "Idempotent-Replayed" not in second
    assert charges(key) == 2


@pytest.mark.requires_redis
def test_a_0_4_3_answer_replayed_in_the_window_is_cached_under_version_2(
    client: Client, redis: Any, caplog: pytest.LogCaptureFixture
) -> None:
    key = new_key()
    first = post(client, "/mint/", key)
    entry = IdempotencyEntry.objects.get(key=key)
    old = sealed_as_0_4_3("", key, stored_answer(entry))
    IdempotencyEntry.objects.filter(pk=entry.pk).update(response_body=old)
    with override_settings(IDEMPOTENCY_OPEN_LEGACY_ROWS=True):
        assert post(client, "/mint/", key).content == first.content  # fills the cache
    with caplog.at_level(logging.WARNING, logger="idempotency_django"):
        replay = post(client, "/mint/", key)  # the window closed: the cache answers
    assert replay.content == first.content
    assert "cache value" not in caplog.text


# -- redaction: what a replay may give whoever holds the key --------------------------------


def test_a_redactor_editing_the_response_in_place_never_inverts_redaction(
    client: Client,
) -> None:
    key = new_key()
    first = post(client, "/blanked/", key)
    assert json.loads(first.content)["token"] == TOKEN  # the first caller: the full answer
    replay = post(client, "/blanked/", key)
    assert json.loads(replay.content)["token"] == MARKER
    assert replay[REDACTED_HEADER] == "true"
    assert TOKEN.encode() not in stored_answer(IdempotencyEntry.objects.get(key=key)).body


@pytest.mark.parametrize("url", ["/drf/", "/html/"])
def test_field_paths_meeting_a_body_they_cannot_read_store_none_of_it(
    client: Client, url: str
) -> None:
    """DRF's browsable API answers ``Accept: text/html`` with a page holding the token."""
    key = new_key()
    first = post(client, url, key, HTTP_ACCEPT="text/html")
    assert first.status_code == 201
    assert TOKEN.encode() in first.content  # the first caller: the full answer
    replay = post(client, url, key)  # a JSON retry
    assert replay.status_code == 201
    assert replay[REDACTED_HEADER] == "true"
    assert replay.content == b""
    assert TOKEN.encode() not in stored_answer(IdempotencyEntry.objects.get(key=key)).body
    assert charges(key) == 1
