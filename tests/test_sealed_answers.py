"""Stored answers are sealed at rest: the raw row and the raw cache value hold no body and
no header value in clear; a row moved to another key or tampered with fails to open with a
clear 500; rotation keeps old rows replayable; a NUL in a header value survives both stores.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.cache import caches
from django.core.management import call_command
from django.db import connection
from django.http import HttpRequest, HttpResponse
from django.test import Client, override_settings
from django.urls import path

from idempotency_django import idempotent
from idempotency_django._operations.checks import check_encryption_keys
from idempotency_django._protocol.responses import StoredResponse
from idempotency_django._storage import cache, seal
from idempotency_django.models import IdempotencyEntry
from tests.factories import IdempotencyEntryFactory
from tests.helpers import charges, new_key, post, problem, stored_answer
from tests.testapp.models import Charge

pytestmark = [pytest.mark.django_db(transaction=True)]

BODY_SECRET = "tok_live_5ecret_body_value"
HEADER_SECRET = "hdr-5ecret-value"
KEY_A, KEY_B, KEY_C = seal.new_key(), seal.new_key(), seal.new_key()


@idempotent
def mint(request: HttpRequest) -> HttpResponse:
    key = request.idempotency.key  # type: ignore[attr-defined]
    Charge.objects.create(reference=key, amount=1)
    response = HttpResponse(
        f'{{"token": "{BODY_SECRET}"}}', status=201, content_type="application/json"
    )
    response["X-Token-Hint"] = HEADER_SECRET
    response["X-Nul"] = "a\x00Set-Cookie\x00stolen=1"
    return response


urlpatterns = [path("mint/", mint)]


@pytest.fixture(autouse=True)
def urls() -> Iterator[None]:
    with override_settings(ROOT_URLCONF=__name__):
        yield


@pytest.fixture
def client() -> Client:
    return Client(raise_request_exception=False)


def raw_row(key: str) -> tuple[str, bytes]:
    """``response_headers`` and ``response_body`` as the database holds them (no ORM)."""
    table = connection.ops.quote_name(IdempotencyEntry._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT response_headers, response_body FROM {table} "
            f"WHERE {connection.ops.quote_name('key')} = %s",
            [key],
        )
        headers, body = cursor.fetchone()
    text = headers if isinstance(headers, str) else repr(headers)
    return text, bytes(body)


def test_the_raw_row_holds_neither_the_body_nor_a_header_value_in_clear(client: Client) -> None:
    key = new_key()
    first = post(client, "/mint/", key)
    assert first.status_code == 201
    assert BODY_SECRET.encode() in first.content
    headers, body = raw_row(key)
    for secret in (BODY_SECRET, HEADER_SECRET, "application/json", "X-Token-Hint"):
        assert secret not in headers
        assert secret.encode() not in body
    replay = post(client, "/mint/", key)
    assert replay.content == first.content
    assert replay["X-Token-Hint"] == HEADER_SECRET
    assert charges(key) == 1


def test_a_nul_in_a_header_value_is_stored_and_replayed_as_it_was(client: Client) -> None:
    key = new_key()
    first = post(client, "/mint/", key)
    assert first.status_code == 201  # stored (PostgreSQL's jsonb would refuse \u0000 in clear)
    replay = post(client, "/mint/", key)
    assert replay["X-Nul"] == "a\x00Set-Cookie\x00stolen=1"
    assert "Set-Cookie" not in replay
    assert not replay.cookies
    assert IdempotencyEntry.objects.get(key=key).status == IdempotencyEntry.Status.COMPLETED


@pytest.mark.requires_redis
def test_the_raw_redis_value_holds_neither_and_a_nul_never_splits_it(
    client: Client, redis_url: str
) -> None:
    key = new_key()
    with override_settings(IDEMPOTENCY_CACHE="replay"):
        try:
            first = post(client, "/mint/", key)
            post(client, "/mint/", key)  # from the database: fills the cache
            backend = caches["replay"]
            redis = backend.client.get_client()  # type: ignore[attr-defined]
            raw = redis.get(backend.make_key(cache.cache_key("default", "", key)))
            assert raw is not None
            for secret in (BODY_SECRET, HEADER_SECRET, "X-Token-Hint", "stolen"):
                assert secret.encode() not in raw
            replay = post(client, "/mint/", key)  # from the cache
            assert replay.content == first.content
            assert replay["X-Nul"] == "a\x00Set-Cookie\x00stolen=1"
            assert "Set-Cookie" not in replay
            assert not replay.cookies
        finally:
            caches["replay"].delete(cache.cache_key("default", "", key))


def move(source: str, target: str) -> None:
    """Copy ``source``'s stored answer onto ``target``'s row (same fingerprint, as an attacker
    with write access to the table would)."""
    row = IdempotencyEntry.objects.get(key=source)
    IdempotencyEntry.objects.filter(key=target).update(
        response_headers=row.response_headers, response_body=row.response_body
    )


def test_a_row_copied_onto_another_key_does_not_open(
    client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    victim, other = new_key(), new_key()
    post(client, "/mint/", victim)
    post(client, "/mint/", other)
    move(victim, other)
    with caplog.at_level(logging.ERROR, logger="idempotency_django"):
        response = post(client, "/mint/", other)
    assert response.status_code == 500
    assert problem(response)["type"].endswith("#answer-unreadable")
    assert BODY_SECRET.encode() not in response.content
    assert charges(other) == 1  # the view did not run again
    assert "moved from another key" in caplog.text


def test_a_row_copied_onto_another_tenant_does_not_open() -> None:
    answer = StoredResponse(201, [("X-A", "1")], b"body")
    sealed = seal.seal("default", "tenant-1", "k", answer)
    assert seal.opened("default", "tenant-1", "k", sealed) == answer
    for tenant, key in (("tenant-2", "k"), ("tenant-1k", ""), ("", "tenant-1k")):
        with pytest.raises(seal.Unreadable, match="moved from another key"):
            seal.opened("default", tenant, key, sealed)


def test_a_tampered_row_does_not_open(client: Client) -> None:
    key = new_key()
    post(client, "/mint/", key)
    row = IdempotencyEntry.objects.get(key=key)
    body = bytearray(row.response_body or b"")
    body[-1] ^= 1
    IdempotencyEntry.objects.filter(key=key).update(response_body=bytes(body))
    response = post(client, "/mint/", key)
    assert response.status_code == 500
    assert problem(response)["type"].endswith("#answer-unreadable")
    assert charges(key) == 1


def test_rotation_keeps_old_rows_replayable_and_reseal_moves_them_to_the_newest_key(
    client: Client,
) -> None:
    old, plain = new_key(), new_key()
    with override_settings(IDEMPOTENCY_ENCRYPTION_KEYS=[KEY_A]):
        first = post(client, "/mint/", old)
    IdempotencyEntryFactory.create(key=plain, response_body=b"0.3 plain")  # written by 0.3
    window = {"IDEMPOTENCY_OPEN_LEGACY_ROWS": True}  # the 0.3 row: as replays, only in it
    with override_settings(IDEMPOTENCY_ENCRYPTION_KEYS=[KEY_B, KEY_A], **window):
        assert post(client, "/mint/", old).content == first.content  # the old key still opens
        out = call_command_output("reseal_idempotency")
        assert "2 resealed" in out
    with override_settings(IDEMPOTENCY_ENCRYPTION_KEYS=[KEY_B]):
        assert post(client, "/mint/", old).content == first.content  # now under KEY_B alone
        entry = IdempotencyEntry.objects.get(key=plain)
        assert seal.is_sealed_row(entry.response_headers)
        assert b"0.3 plain" not in bytes(entry.response_body or b"")
    with override_settings(IDEMPOTENCY_ENCRYPTION_KEYS=[KEY_C]):
        response = post(client, "/mint/", old)
    assert response.status_code == 500
    assert problem(response)["type"].endswith("#answer-unreadable")
    assert charges(old) == 1


def test_the_derived_key_and_an_own_key_live_side_by_side(client: Client) -> None:
    key = new_key()
    first = post(client, "/mint/", key)  # the default: derived from the server secret
    with override_settings(IDEMPOTENCY_ENCRYPTION_KEYS=[KEY_A, seal.DERIVED]):
        assert post(client, "/mint/", key).content == first.content


def as_written_by_0_3(key: str) -> None:
    """The entry's answer as 0.3 stored it: headers a JSON list, the body in clear.

    Without the NUL header: PostgreSQL's jsonb holds no NUL (0.3 could not store one).
    """
    entry = IdempotencyEntry.objects.get(key=key)
    answer = stored_answer(entry)
    headers = [[name, value] for name, value in answer.headers if "\x00" not in value]
    IdempotencyEntry.objects.filter(pk=entry.pk).update(
        response_headers=headers, response_body=answer.body
    )


@override_settings(IDEMPOTENCY_OPEN_LEGACY_ROWS=True)
def test_a_row_written_by_0_3_in_clear_is_replayed_in_the_upgrade_window(client: Client) -> None:
    key = new_key()
    first = post(client, "/mint/", key)
    as_written_by_0_3(key)
    replay = post(client, "/mint/", key)
    assert replay.content == first.content
    assert replay["Idempotent-Replayed"] == "true"


def test_a_row_written_by_0_3_in_clear_is_unreadable_outside_the_upgrade_window(
    client: Client,
) -> None:
    key = new_key()
    post(client, "/mint/", key)
    as_written_by_0_3(key)
    response = post(client, "/mint/", key)
    assert response.status_code == 500
    assert problem(response)["type"].endswith("#answer-unreadable")
    assert charges(key) == 1  # the view never runs again


def test_an_operator_reads_a_row_written_by_0_3_whatever_the_window() -> None:
    entry = IdempotencyEntryFactory.create(key=new_key(), tenant="")
    response = seal.answer_of("default", entry)  # the admin's and inspect_idempotency's look
    assert response is not None
    assert response.body == b'{"id": 1}'


def call_command_output(*args: Any) -> str:
    from io import StringIO

    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        (["server-secret"], True),
        ([KEY_A, "server-secret"], True),
        ((KEY_A,), True),
        ([], False),
        ("server-secret", False),
        (["not base64!"], False),
        ([KEY_A[:-4]], False),  # 29 bytes
        ([32], False),
    ],
)
def test_check_e120_refuses_a_malformed_key_list(value: Any, ok: bool) -> None:
    messages = check_encryption_keys(value)
    assert (messages == []) is ok
    assert all(m.id == "idempotency_django.E120" for m in messages)


def test_manage_py_check_fails_on_a_malformed_key_list() -> None:
    from django.core.management.base import SystemCheckError

    with (
        override_settings(IDEMPOTENCY_ENCRYPTION_KEYS=["short"]),
        pytest.raises(SystemCheckError, match="E120"),
    ):
        call_command("check")


def test_new_key_prints_a_key_the_setting_accepts() -> None:
    key = call_command_output("reseal_idempotency", "--new-key").strip()
    assert len(seal.decode_key(key)) == 32
    assert check_encryption_keys([key]) == []
