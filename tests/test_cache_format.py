"""The replay cache's stored value, its two stores, and the write held until the response is sent.

No Redis needed: the stores are chosen without connecting, and the rest runs
on Django's local-memory cache. tests/test_cache.py covers real Redis, and
tests/test_sealing_adversaries.py a co-tenant of it who plants values.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from django.core.cache import caches
from django.core.signals import request_finished, request_started
from django.db import OperationalError
from django.test import override_settings
from hypothesis import given
from hypothesis import strategies as st

from idempotency_django._storage import cache
from idempotency_django._storage.seal import Sealed

LOCAL: dict[str, Any] = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "local": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "fmt"},
}
TTL = timedelta(seconds=60)
ANSWER = Sealed(201, "Created", b"\x01sealed headers and body")

header_text = st.text(st.characters(min_codepoint=32, max_codepoint=0x2FFF), max_size=40)


NAME = "idempotency:" + "ab" * 32


@given(
    fingerprint=st.text(alphabet="0123456789abcdef:", max_size=140),
    status=st.integers(100, 599),
    blob=st.binary(max_size=2000),
    reason=header_text,
)
def test_an_answer_comes_back_as_it_was_stored(
    fingerprint: str, status: int, blob: bytes, reason: str
) -> None:
    answer = Sealed(status, reason, blob)
    assert cache.decode(NAME, cache.encode(NAME, fingerprint, answer)) == (fingerprint, answer)


def test_the_stored_value_is_the_librarys_own_bytes_never_a_pickle() -> None:
    value = cache.encode(NAME, "f", ANSWER)
    assert value[:1] == b"\x03"
    with pytest.raises(pickle.UnpicklingError):
        pickle.loads(value)


@pytest.mark.parametrize(
    "value",
    [
        None,
        {"fingerprint": "f", "status": 201, "headers": [], "body": b"", "reason": ""},  # 0.1's
        pickle.dumps({"status": 201}),
        b"not a pickle",
        pickle.dumps(cache.encode(NAME, "f", ANSWER)),  # 0.4's wrapping
        cache.encode(NAME, "f", ANSWER)[:-3],  # a truncated value
        cache.encode(NAME, "f", ANSWER)[:-32] + bytes(32),  # a forged tag
        cache.encode("idempotency:" + "cd" * 32, "f", ANSWER),  # another name's value
    ],
)
def test_a_value_it_cannot_authenticate_is_a_miss(value: object) -> None:
    assert cache.decode(NAME, value) is None


@override_settings(SECRET_KEY="another project's")
def test_a_value_from_another_projects_secret_is_a_miss() -> None:
    value = cache.encode(NAME, "f", ANSWER)
    with override_settings(SECRET_KEY="this project's"):
        assert cache.decode(NAME, value) is None


def test_both_redis_backends_get_the_raw_client_and_the_rest_the_cache_api() -> None:
    redis = "redis://127.0.0.1:6379/15"  # never connected to: choosing a store doesn't connect
    setting = {
        **LOCAL,
        "django_redis": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": redis},
        "replicated": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": [redis, redis]},
        "django": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": redis},
        "sharded": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": [redis, redis],
            "OPTIONS": {"CLIENT_CLASS": "django_redis.client.ShardClient"},
        },
    }
    with override_settings(CACHES=setting):
        for alias in ("django_redis", "replicated", "django"):
            assert isinstance(cache._store(alias), cache._Redis)
        for alias in ("sharded", "local"):
            assert isinstance(cache._store(alias), cache._Generic)


@pytest.fixture
def local(db: None) -> Iterator[None]:
    """Names carry the database's identity: a database to read it from."""
    with override_settings(CACHES=LOCAL):
        yield
        caches["local"].clear()


def test_the_generic_store_keeps_and_returns_an_answer(local: None) -> None:
    cache.put("local", "default", "t", "k", "fp", ANSWER, TTL)
    assert cache.get("local", "default", "t", "k") == ("fp", ANSWER)
    assert cache.get("local", "default", "other tenant", "k") is None


def test_during_a_wsgi_request_the_write_waits_for_its_end(local: None) -> None:
    request_started.send(sender=None, environ={})
    cache.put("local", "default", "", "k", "fp", ANSWER, TTL)
    assert cache.get("local", "default", "", "k") is None
    request_finished.send(sender=None)
    assert cache.get("local", "default", "", "k") == ("fp", ANSWER)


def test_outside_a_wsgi_request_the_write_is_at_once(local: None) -> None:
    request_started.send(sender=None, scope={})  # ASGI: no environ
    cache.put("local", "default", "", "k", "fp", ANSWER, TTL)
    assert cache.get("local", "default", "", "k") == ("fp", ANSWER)
    request_finished.send(sender=None)


def test_a_write_left_behind_is_sent_when_the_next_request_starts(local: None) -> None:
    request_started.send(sender=None, environ={})
    cache.put("local", "default", "", "k", "fp", ANSWER, TTL)
    request_started.send(sender=None, environ={})
    assert cache.get("local", "default", "", "k") == ("fp", ANSWER)
    request_finished.send(sender=None)


def test_a_held_write_never_outlives_the_lifetime_it_was_given(
    local: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(cache, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    request_started.send(sender=None, environ={})
    cache.put("local", "default", "", "k", "fp", ANSWER, timedelta(seconds=5))
    clock[0] += 4.5  # under a second left when the request ends: not worth caching
    request_finished.send(sender=None)
    monkeypatch.undo()
    assert cache.get("local", "default", "", "k") is None


def test_a_database_error_reading_the_identity_is_a_miss_not_a_paused_cache(
    local: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first request of a process meeting a database outage: the claim answers it."""

    def away(using: str) -> bytes:
        raise OperationalError("the database is away")

    monkeypatch.setattr(cache, "database_identity", away)
    assert cache.get("local", "default", "", "k") is None
    assert not cache._paused("local")


@pytest.mark.parametrize(
    "body",
    [
        cache._HEAD.pack(3, 201, 5, 0, 0) + b"f",  # lengths past the end
        cache._HEAD.pack(3, 201, 1, 0, 0) + b"f" + b"left over",  # bytes past the lengths
        cache._HEAD.pack(3, 201, 1, 0, 0) + b"\xff",  # a fingerprint that is not UTF-8
    ],
    ids=["short", "long", "not-utf8"],
)
def test_a_value_that_authenticates_but_does_not_parse_is_a_miss(body: bytes) -> None:
    # Only this project's key tags a value: another release's layout, never a crash.
    assert cache.decode(NAME, body + cache._mac(NAME, body)) is None


def test_a_cached_value_that_does_not_open_is_a_miss_the_database_answers(
    local: None, caplog: pytest.LogCaptureFixture
) -> None:
    cache.put("local", "default", "", "k", "fp", Sealed(201, "Created", b"\x02not sealed"), TTL)
    assert cache.get("local", "default", "", "k") is not None  # authenticated, stored by us
    assert cache.replay("local", "default", "", "k", lambda stored: stored == "fp") is None
    assert "idempotency cache value did not open" in caplog.text


def test_a_cache_that_refuses_a_write_is_left_alone_for_a_while(
    local: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from idempotency_django import signals

    monkeypatch.setattr(cache, "_paused_until", {})
    failed: list[str] = []

    def refusing(*args: Any) -> None:
        raise ConnectionError("READONLY You can't write against a read only replica.")

    def receiver(sender: str, operation: str, **kwargs: Any) -> None:
        failed.append(operation)

    signals.cache_failed.connect(receiver)
    try:
        with monkeypatch.context() as patch:
            patch.setattr(caches["local"], "set", refusing)
            cache.put("local", "default", "", "k", "fp", ANSWER, TTL)
    finally:
        signals.cache_failed.disconnect(receiver)
    assert failed == ["set"]
    assert "answer not cached" in caplog.text
    assert cache._paused("local")
    cache.put("local", "default", "", "k", "fp", ANSWER, TTL)  # paused: not even sent
    cache._paused_until.clear()
    assert cache.get("local", "default", "", "k") is None
    cache.put("local", "default", "", "k", "fp", ANSWER, TTL)  # back: written again
    assert cache.get("local", "default", "", "k") == ("fp", ANSWER)


def test_a_plain_answer_is_sealed_for_the_cache_unless_over_todays_bound(
    local: None, django_capture_on_commit_callbacks: Any
) -> None:
    from idempotency_django._protocol.responses import StoredResponse

    answer = StoredResponse(201, [("Content-Type", "application/json")], b'{"id": 7}', "Created")
    assert not answer.sealed  # as a 0.3 row holds it: in clear
    with django_capture_on_commit_callbacks(execute=True):
        cache.fill_on_commit("local", "default", "", "small", "fp", answer, 60.0)
    opened = cache.replay("local", "default", "", "small", lambda stored: stored == "fp")
    assert opened is not None
    assert (opened.status, opened.headers, opened.body) == (201, answer.headers, answer.body)

    large = StoredResponse(201, [], bytes(5000), "Created")
    with (
        override_settings(IDEMPOTENCY_MAX_STORED_BYTES=1024),
        django_capture_on_commit_callbacks(execute=True) as callbacks,
    ):
        cache.fill_on_commit("local", "default", "", "large", "fp", large, 60.0)
    assert callbacks == []  # replayed from the database only
    assert cache.get("local", "default", "", "large") is None
