"""``reseal_idempotency`` against replay, row shape by row shape: one decision, two readers.

For every shape a row can have (sealed now, under an older key, under a key gone, each
legacy form the code knows, tampered, moved, planted by a table writer, bound to another
database), with the legacy window closed and open: what a replay answers before the
reseal is what it answers after it, byte for byte, and a row a replay refuses is left as
it was. A reseal that decided for itself what to open would launder a planted row.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from unittest import mock

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from django.core.management import call_command
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.test import Client, override_settings
from django.urls import path

from idempotency_django import idempotent
from idempotency_django._protocol.responses import StoredResponse
from idempotency_django._storage import seal, secret
from idempotency_django.models import IdempotencyEntry
from tests.helpers import charges, new_key, post, problem, stored_answer
from tests.test_sealing_adversaries import PAID, sealed_as_0_4_3
from tests.testapp.models import Charge

pytestmark = [pytest.mark.django_db(transaction=True)]
NEWEST, OLDER, GONE = seal.new_key(), seal.new_key(), seal.new_key()
KEYS = {"IDEMPOTENCY_ENCRYPTION_KEYS": [NEWEST, OLDER, seal.DERIVED]}
KEYS_OLDER = {"IDEMPOTENCY_ENCRYPTION_KEYS": [OLDER]}
KEYS_GONE = {"IDEMPOTENCY_ENCRYPTION_KEYS": [GONE]}
PLANTED = StoredResponse(
    201,
    [("Content-Type", "application/json"), ("Location", "https://forger.example/pay")],
    PAID,
    "Created",
)


@idempotent
def pay(request: HttpRequest) -> HttpResponse:
    made = Charge.objects.create(reference=request.idempotency.key, amount=1)  # type: ignore[attr-defined]
    response = JsonResponse({"charge": made.pk}, status=201)
    response["Location"] = f"/charges/{made.pk}"
    return response


urlpatterns = [path("pay/", pay)]


@pytest.fixture(autouse=True)
def urls() -> Iterator[None]:
    with override_settings(ROOT_URLCONF=__name__, **KEYS):
        yield


# -- the row shapes: each, the columns it writes over a genuine first answer -------------

Columns = dict[str, Any]


def blob_of(tenant: str, key: str, answer: StoredResponse, **settings: Any) -> bytes:
    with override_settings(**settings):
        return seal.seal("default", tenant, key, answer).blob


def clear_row(answer: StoredResponse) -> Columns:
    """0.3's form: headers a JSON list, the body in clear."""
    return {
        "response_status": answer.status,
        "response_reason": answer.reason,
        "response_headers": [list(pair) for pair in answer.headers],
        "response_body": answer.body,
    }


def sealed_0_4(key: str, answer: StoredResponse) -> Columns:
    blob = sealed_as_0_4_3("", key, answer)
    status = {"response_status": answer.status, "response_reason": answer.reason}
    return {**status, "response_headers": seal.ROW_MARKER, "response_body": blob}


def in_another_database(key: str, answer: StoredResponse) -> Columns:
    with mock.patch.object(secret, "database_identity", return_value=b"another database"):
        return {"response_body": blob_of("", key, answer)}


def sealed_0_5(key: str, answer: StoredResponse, row_identity: bytes | None = None) -> Columns:
    """0.5's seal (version 2): bound to the database's identity row alone."""
    cipher, nonce = seal.decode_key(NEWEST), os.urandom(12)
    identity = secret.row_identity("default") if row_identity is None else row_identity
    with mock.patch.object(secret, "row_identity", return_value=identity):
        aad = seal.bound("default", "", key, answer.status, answer.reason, seal.VERSION_0_5)
    sealed = AESGCM(cipher).encrypt(nonce, seal.plain(answer), aad)
    return {"response_body": seal.VERSION_0_5 + seal.key_id(cipher) + nonce + sealed}


def flipped(blob: bytes) -> bytes:
    return blob[:-1] + bytes([blob[-1] ^ 1])


@dataclass(frozen=True)
class Shape:
    name: str
    columns: Callable[[IdempotencyEntry, StoredResponse], Columns]
    opens: Callable[[bool], bool]  # given the legacy window: whether a replay opens it
    planted: bool = False  # what opens is the table writer's answer, not the view's


def always(window: bool) -> bool:
    return True


def never(window: bool) -> bool:
    return False


def in_the_window(window: bool) -> bool:
    return window


SHAPES = [
    Shape("sealed under the newest key", lambda entry, answer: {}, always),
    Shape(
        "sealed under an older key still listed",
        lambda entry, answer: {"response_body": blob_of("", entry.key, answer, **KEYS_OLDER)},
        always,
    ),
    Shape(
        "sealed under a key no longer listed",
        lambda entry, answer: {"response_body": blob_of("", entry.key, answer, **KEYS_GONE)},
        never,
    ),
    Shape("0.4's seal", lambda entry, answer: sealed_0_4(entry.key, answer), in_the_window),
    Shape(
        "0.4's seal forged by a table writer",
        lambda entry, answer: sealed_0_4(entry.key, PLANTED),
        in_the_window,
        planted=True,
    ),
    Shape("0.3's clear form", lambda entry, answer: clear_row(answer), in_the_window),
    Shape(
        "0.3's clear form planted by a table writer",
        lambda entry, answer: clear_row(PLANTED),
        in_the_window,
        planted=True,
    ),
    Shape("0.5's seal", lambda entry, answer: sealed_0_5(entry.key, answer), in_the_window),
    Shape(
        "0.5's seal from another database",
        lambda entry, answer: sealed_0_5(entry.key, answer, b"another row"),
        never,
    ),
    Shape(
        "a tampered body",
        lambda entry, answer: {"response_body": flipped(bytes(entry.response_body or b""))},
        never,
    ),
    Shape("an edited status", lambda entry, answer: {"response_status": 200}, never),
    Shape(
        "the sealed marker edited into 0.3's form (the blob read as a clear body)",
        lambda entry, answer: {"response_headers": [["Content-Type", "application/json"]]},
        in_the_window,
    ),
    # The headers column only tells 0.3's form from a seal: anything else is read as
    # sealed, and the body (sealed, authenticated) decides.
    Shape("headers that are neither form", lambda entry, answer: {"response_headers": "x"}, always),
    Shape("headers that are not pairs", lambda entry, answer: {"response_headers": [7]}, always),
    Shape(
        "neither form over a clear body",
        lambda entry, answer: {"response_headers": [7], "response_body": PAID},
        never,
    ),
    Shape("an edited reason", lambda entry, answer: {"response_reason": "OK"}, never),
    Shape(
        "a finished row without a status", lambda entry, answer: {"response_status": None}, never
    ),
    Shape("a status no response carries", lambda entry, answer: {"response_status": 700}, never),
    Shape(
        "0.3's clear form under a status no response carries",
        lambda entry, answer: {**clear_row(answer), "response_status": 700},
        never,
    ),
    Shape(
        "moved from another key",
        lambda entry, answer: {"response_body": blob_of("", new_key(), answer)},
        never,
    ),
    Shape(
        "moved from another tenant",
        lambda entry, answer: {"response_body": blob_of("bob", entry.key, answer)},
        never,
    ),
    Shape(
        "moved from another database (bound to another identity)",
        lambda entry, answer: in_another_database(entry.key, answer),
        never,
    ),
    Shape("not a sealed answer", lambda entry, answer: {"response_body": b"\x02junk"}, never),
    Shape("an empty body", lambda entry, answer: {"response_body": b""}, never),
]


# -- what a replay answers ----------------------------------------------------------------

UNREADABLE = ("answer-unreadable",)


def replayed(client: Client, key: str) -> tuple[Any, ...]:
    """A retry's whole answer (status, reason, headers, body), or :data:`UNREADABLE`."""
    response = post(client, "/pay/", key)
    if response.status_code == 500:
        assert str(problem(response)["type"]).endswith("#answer-unreadable")
        return UNREADABLE
    assert response["Idempotent-Replayed"] == "true"
    headers = sorted(response.items())
    return (response.status_code, response.reason_phrase, headers, response.content)


def columns(key: str) -> tuple[Any, ...]:
    entry = IdempotencyEntry.objects.get(key=key)
    headers, body = entry.response_headers, bytes(entry.response_body or b"")
    return (entry.response_status, entry.response_reason, headers, body)


@pytest.mark.parametrize("window", [False, True], ids=["window-closed", "window-open"])
@pytest.mark.parametrize("shape", SHAPES, ids=[shape.name for shape in SHAPES])
def test_reseal_makes_openable_exactly_what_replay_opens(shape: Shape, window: bool) -> None:
    client, key = Client(raise_request_exception=False), new_key()
    assert post(client, "/pay/", key).status_code == 201
    entry = IdempotencyEntry.objects.get(key=key)
    IdempotencyEntry.objects.filter(pk=entry.pk).update(
        **shape.columns(entry, stored_answer(entry))
    )
    with override_settings(IDEMPOTENCY_OPEN_LEGACY_ROWS=window):
        before, row = replayed(client, key), columns(key)
        call_command("reseal_idempotency", stdout=io.StringIO())
        after = replayed(client, key)
    assert after == before
    assert (before != UNREADABLE) == shape.opens(window)
    if before == UNREADABLE:
        assert columns(key) == row  # left as it was
    else:
        assert (PAID in before[3]) == shape.planted
    assert charges(key) == 1  # a refused row never runs the view again


def test_upgrading_from_0_5_reseal_in_the_window_binds_its_answers_to_the_server() -> None:
    """docs/security.rst, "Upgrading from 0.5": the window on, reseal; then the window off."""
    client, key = Client(raise_request_exception=False), new_key()
    first = post(client, "/pay/", key)
    entry = IdempotencyEntry.objects.get(key=key)
    IdempotencyEntry.objects.filter(pk=entry.pk).update(**sealed_0_5(key, stored_answer(entry)))
    assert replayed(client, key) == UNREADABLE  # 0.5's, the window closed
    with override_settings(IDEMPOTENCY_OPEN_LEGACY_ROWS=True):
        call_command("reseal_idempotency", stdout=io.StringIO())
    assert bytes(IdempotencyEntry.objects.get(key=key).response_body or b"")[:1] == seal.VERSION
    assert replayed(client, key)[3] == first.content
    assert charges(key) == 1
