"""The declarative redactor's rules, and a sealed answer through a cache that isn't Redis:
a 0.3 row replayed is cached sealed, and a cache value that does not open is a miss."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
from django.core.cache import caches
from django.http import HttpResponse, JsonResponse
from django.test import Client, override_settings

from idempotency_django._protocol.redact import MARKER, REDACTED_HEADER, FieldPaths, stored_answer
from idempotency_django._storage import cache, seal
from idempotency_django.models import IdempotencyEntry
from tests.factories import IdempotencyEntryFactory
from tests.helpers import post


def test_a_body_the_paths_cannot_read_is_not_stored_at_all() -> None:
    """Fail closed: a path may name a secret in a body it cannot parse (issue 44)."""
    paths = FieldPaths(["token"])
    text = HttpResponse(b"token=abc", content_type="text/plain", status=201)
    text["Location"] = "/tokens/7"
    broken = HttpResponse(b'{"token": "abc", not json', content_type="application/json")
    for response in (text, broken):
        stored = stored_answer(response, paths)
        assert stored.body == b""
        assert (REDACTED_HEADER, "true") in stored.headers
        assert not [name for name, _ in stored.headers if name.lower() == "content-type"]
        assert b"abc" in response.content  # the caller's answer is untouched
    assert ("Location", "/tokens/7") in stored_answer(text, paths).headers
    assert stored_answer(text, paths).status == 201


def test_an_empty_body_is_stored_as_it_is() -> None:
    empty = HttpResponse(status=204)
    assert stored_answer(empty, FieldPaths(["token"])).headers == stored_answer(empty, None).headers


def test_field_paths_keep_status_reason_and_headers() -> None:
    response = JsonResponse({"token": "t", "n": 1}, status=402)
    response.reason_phrase = "Card Declined"
    response["Location"] = "/x"
    stored = stored_answer(response, FieldPaths(["token", "missing.deeper"]))
    assert json.loads(stored.body) == {"token": MARKER, "n": 1}
    assert (stored.status, stored.reason) == (402, "Card Declined")
    assert ("Location", "/x") in stored.headers
    assert (REDACTED_HEADER, "true") in stored.headers
    assert json.loads(response.content)["token"] == "t"  # the caller's answer is untouched


def test_a_callable_returning_an_equal_answer_is_not_marked() -> None:
    response = JsonResponse({"a": 1})
    same = stored_answer(response, lambda r: JsonResponse({"a": 1}))
    assert REDACTED_HEADER not in dict(same.headers)


def test_field_paths_compare_by_value() -> None:
    assert FieldPaths(["a", "b.c"]) == FieldPaths(["a", "b.c"])
    assert hash(FieldPaths(["a"])) == hash(FieldPaths(["a"]))
    assert FieldPaths(["a"]) != ["a"]


LOCAL = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "local": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "seal"},
}


@pytest.fixture
def local_cache() -> Iterator[None]:
    with override_settings(CACHES=LOCAL, IDEMPOTENCY_CACHE="local"):
        yield
        caches["local"].clear()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("local_cache")
@override_settings(IDEMPOTENCY_OPEN_LEGACY_ROWS=True)  # 0.3's rows replay only in the window
def test_a_plain_0_3_row_replayed_in_the_upgrade_window_is_cached_sealed() -> None:
    client = Client(raise_request_exception=False)
    entry = IdempotencyEntryFactory.create(tenant="", key="old")
    real = post(client, "/charges/", "old-probe")  # the fingerprint a POST of this body gets
    probe = IdempotencyEntry.objects.get(key="old-probe")
    IdempotencyEntry.objects.filter(pk=entry.pk).update(fingerprint=probe.fingerprint)
    assert real.status_code == 201
    replay = post(client, "/charges/", "old")
    assert replay.content == b'{"id": 1}'
    name = cache.cache_key("default", "", "old")
    _fingerprint, sealed = cache.decode(name, caches["local"].get(name)) or ("", None)
    assert sealed is not None
    assert b'{"id": 1}' not in sealed.blob
    assert seal.opened("default", "", "old", sealed).body == b'{"id": 1}'
    assert post(client, "/charges/", "old").content == b'{"id": 1}'  # from the cache


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("local_cache")
def test_a_cache_value_that_does_not_open_is_a_miss(caplog: pytest.LogCaptureFixture) -> None:
    client = Client(raise_request_exception=False)
    first = post(client, "/charges/", "k")
    post(client, "/charges/", "k")  # fills the cache
    name = cache.cache_key("default", "", "k")
    fingerprint, sealed = cache.decode(name, caches["local"].get(name)) or ("", None)
    assert sealed is not None
    tampered = seal.Sealed(
        sealed.status, sealed.reason, sealed.blob[:-1] + bytes([sealed.blob[-1] ^ 1])
    )
    caches["local"].set(name, cache.encode(name, fingerprint, tampered))
    with caplog.at_level(logging.WARNING, logger="idempotency_django"):
        replay = post(client, "/charges/", "k")
    assert replay.content == first.content  # the database answered
    assert "cache value did not open" in caplog.text
