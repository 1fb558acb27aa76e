"""The replay cache (``IDEMPOTENCY_CACHE``) against real Redis through django-redis.

The shared Redis on 127.0.0.1:6379 serves the fast-path tests (the "replay"
alias of tests/settings.py); the outage tests start a private ``redis-server``
of their own on a free port, so that stopping it disturbs nobody else.
The database stays the source of truth: every test checks what the client got.
"""

from __future__ import annotations

import json
import logging
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.cache import caches
from django.db import connection, transaction
from django.db.utils import DatabaseError
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext

from idempotency_django._storage import cache
from idempotency_django._storage.store import carry
from idempotency_django.models import IdempotencyEntry
from tests.conftest import reachable, service_missing
from tests.helpers import charges, new_key, post, problem

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.requires_redis]
# Short: a leftover of an interrupted run must not outlive it for long.
TTL = 300


@pytest.fixture
def client() -> Client:
    return Client(raise_request_exception=False)


@pytest.fixture(autouse=True)
def fresh_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    """No alias paused by an earlier test; short pauses, so that a test can outlast one."""
    monkeypatch.setattr(cache, "_paused_until", {})
    monkeypatch.setattr(cache, "PAUSE", 0.5)


@pytest.fixture
def replay(redis_url: str) -> Iterator[list[tuple[str, str]]]:
    """The shared Redis as the replay cache; the (tenant, key) pairs a test lists are deleted after it."""
    used: list[tuple[str, str]] = []
    with override_settings(IDEMPOTENCY_CACHE="replay", IDEMPOTENCY_TTL=TTL):
        yield used
        caches["replay"].delete_many(
            [cache.cache_key("default", tenant, key) for tenant, key in used]
        )


def cached_key(used: list[tuple[str, str]], tenant: str = "") -> str:
    key = new_key()
    used.append((tenant, key))
    return key


def in_cache(key: str, tenant: str = "", alias: str = "replay") -> bool:
    # The raw client, as the library reads: a value is its own bytes, not a pickle.
    return cache._store(alias).get(cache.cache_key("default", tenant, key)) is not None


def test_retry_is_answered_from_the_cache_without_sql(
    client: Client, replay: list[tuple[str, str]]
) -> None:
    key = cached_key(replay)
    first = post(client, "/charges/", key)
    assert not in_cache(key)  # a first execution sends no SET: most keys are never retried
    assert post(client, "/charges/", key)["Idempotent-Replayed"] == "true"  # from the database
    assert in_cache(key)  # ... which filled the cache
    with CaptureQueriesContext(connection) as queries:
        retry = post(client, "/charges/", key)
    assert len(queries) == 0
    assert retry.status_code == first.status_code == 201
    assert retry.content == first.content
    assert retry["Location"] == first["Location"]
    assert retry["Idempotent-Replayed"] == "true"
    assert charges(key) == 1


def test_final_4xx_is_cached_too(client: Client, replay: list[tuple[str, str]]) -> None:
    key = cached_key(replay)
    first = post(client, "/charges/", key, {"status": 402})
    post(client, "/charges/", key, {"status": 402})  # the database's replay fills the cache
    with CaptureQueriesContext(connection) as queries:
        retry = post(client, "/charges/", key, {"status": 402})
    assert len(queries) == 0
    assert retry.status_code == 402
    assert retry.content == first.content


def test_other_fingerprint_is_422_from_the_cache_and_reveals_nothing(
    client: Client, replay: list[tuple[str, str]]
) -> None:
    key = cached_key(replay)
    first = post(client, "/charges/", key)
    post(client, "/charges/", key)  # the database's replay fills the cache
    with CaptureQueriesContext(connection) as queries:
        reused = post(client, "/charges/", key, {"amount": 999})
    assert len(queries) == 0
    assert reused.status_code == 422
    problem(reused)
    assert first.content not in reused.content
    assert b"Location" not in reused.content
    assert charges(key) == 1


def test_another_tenant_never_gets_the_cached_answer(
    client: Client, replay: list[tuple[str, str]]
) -> None:
    alice = User.objects.create_user("alice", password="pw")
    bob = User.objects.create_user("bob", password="pw")
    key = cached_key(replay, str(alice.pk))
    replay.append((str(bob.pk), key))
    client.force_login(alice)
    first = post(client, "/charges/", key)
    post(client, "/charges/", key)  # the database's replay fills the cache
    assert in_cache(key, str(alice.pk))
    client.force_login(bob)
    other = post(client, "/charges/", key)
    assert other.status_code == 201
    assert "Idempotent-Replayed" not in other
    assert json.loads(other.content)["tenant"] == str(bob.pk)
    assert other.content != first.content
    assert charges(key) == 2


def test_eviction_falls_back_to_the_database_and_refills(
    client: Client, replay: list[tuple[str, str]]
) -> None:
    key = cached_key(replay)
    first = post(client, "/charges/", key)
    caches["replay"].delete(cache.cache_key("default", "", key))
    with CaptureQueriesContext(connection) as queries:
        from_db = post(client, "/charges/", key)
    assert len(queries) >= 1  # the claim read the stored answer
    assert from_db.content == first.content
    assert from_db["Idempotent-Replayed"] == "true"
    assert in_cache(key)
    with CaptureQueriesContext(connection) as queries:
        assert post(client, "/charges/", key).content == first.content
    assert len(queries) == 0
    assert charges(key) == 1


@pytest.mark.parametrize("status", [500, 503, 408, 409, 425, 429])
def test_transient_answers_are_never_cached(
    client: Client, replay: list[tuple[str, str]], status: int
) -> None:
    key = cached_key(replay)
    assert post(client, "/charges/", key, {"status": status}).status_code == status
    assert not in_cache(key)
    retry = post(client, "/charges/", key)
    assert retry.status_code == 201
    assert "Idempotent-Replayed" not in retry


def test_exception_is_never_cached(client: Client, replay: list[tuple[str, str]]) -> None:
    key = cached_key(replay)
    assert post(client, "/charges/", key, {"raise": True}).status_code == 500
    assert not in_cache(key)


def test_rolled_back_caller_transaction_never_writes_the_cache(
    client: Client, replay: list[tuple[str, str]]
) -> None:
    key = cached_key(replay)
    with transaction.atomic():
        assert post(client, "/charges/", key).status_code == 201
        transaction.set_rollback(True)
    assert not in_cache(key)
    assert not IdempotencyEntry.objects.filter(key=key).exists()
    retry = post(client, "/charges/", key)
    assert retry.status_code == 201
    assert "Idempotent-Replayed" not in retry
    assert charges(key) == 1


def test_failed_commit_never_writes_the_cache(
    client: Client, replay: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    key = cached_key(replay)

    def fail() -> None:
        raise DatabaseError("commit failed")

    monkeypatch.setattr(connection, "commit", fail)
    # Django's own COMMIT, not one carried by the record (store.carry).
    monkeypatch.setattr(carry, "carry_commit", lambda conn: False)
    assert post(client, "/charges/", key).status_code == 500
    monkeypatch.undo()
    assert not in_cache(key)
    assert charges(key) == 0


# A Redis of our own, to stop and start: never the shared one.


class PrivateRedis:
    """``redis-server`` on a free port, without persistence."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.port = _free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        command = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1"]
        command += ["--save", "", "--appendonly", "no"]
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 10
        while not reachable("127.0.0.1", self.port):
            if time.monotonic() > deadline or self.process.poll() is not None:
                self.kill()
                service_missing(f"could not start {self.binary} on port {self.port}")
            time.sleep(0.05)

    def kill(self) -> None:
        """Stop it the hard way, as a crash would."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self.process = None

    def pause(self) -> None:
        """Freeze it: connections stay open, nothing answers."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def private_redis() -> Iterator[PrivateRedis]:
    binary = shutil.which("redis-server")
    if binary is None:
        service_missing("redis-server is not installed")
    assert binary is not None
    server = PrivateRedis(binary)
    server.start()
    caches_setting: dict[str, Any] = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "private": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": server.url,
            # Short timeouts: a dead or frozen Redis must not stall requests.
            "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 0.2, "SOCKET_TIMEOUT": 0.2},
        },
    }
    try:
        with override_settings(CACHES=caches_setting, IDEMPOTENCY_CACHE="private"):
            yield server
    finally:
        if server.process is not None:
            server.resume()
        server.kill()


def test_redis_stopped_mid_test_falls_back_to_the_database(
    client: Client, private_redis: PrivateRedis, caplog: pytest.LogCaptureFixture
) -> None:
    key = new_key()
    first = post(client, "/charges/", key)
    post(client, "/charges/", key)  # the database's replay fills the cache
    assert in_cache(key, alias="private")
    private_redis.kill()
    with caplog.at_level(logging.WARNING, logger="idempotency_django"):
        retry = post(client, "/charges/", key)
        fresh_key = new_key()
        fresh = post(client, "/charges/", fresh_key)
        reused = post(client, "/charges/", key, {"amount": 999})
    assert retry.content == first.content
    assert retry["Idempotent-Replayed"] == "true"
    assert fresh.status_code == 201
    assert "Idempotent-Replayed" not in fresh
    assert reused.status_code == 422
    assert any("unreachable" in r.getMessage() for r in caplog.records)
    assert charges(key) == charges(fresh_key) == 1
    private_redis.start()
    _answered_from_cache_again(client, key, first.content)


def _answered_from_cache_again(client: Client, key: str, content: bytes) -> None:
    # Once the pause is over, the restarted (empty) Redis is tried again: the next
    # retry replays from the database and refills the cache (a pooled connection
    # may first fail once, which pauses the cache once more).
    for _ in range(3):
        time.sleep(cache.PAUSE)
        assert post(client, "/charges/", key).content == content
        if in_cache(key, alias="private"):
            break
    with CaptureQueriesContext(connection) as queries:
        assert post(client, "/charges/", key).content == content
    assert len(queries) == 0


def test_frozen_redis_costs_one_attempt_then_is_left_alone(
    client: Client,
    private_redis: PrivateRedis,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A frozen Redis (SIGSTOP: the socket times out) is asked once, then paused: the
    next retry does not wait on it. Counted at the store, not timed (any load)."""
    key = new_key()
    first = post(client, "/charges/", key)
    attempts: list[str] = []
    real_store = cache._store

    def counted(alias: str) -> Any:
        store = real_store(alias)

        class Counting:
            def get(self, name: str) -> Any:
                attempts.append(name)
                return store.get(name)

            def set(self, name: str, value: bytes, milliseconds: int) -> None:
                store.set(name, value, milliseconds)

        return Counting()

    monkeypatch.setattr(cache, "_store", counted)
    private_redis.pause()
    try:
        with caplog.at_level(logging.WARNING, logger="idempotency_django"):
            retry = post(client, "/charges/", key)
            assert len(attempts) == 1  # tried, timed out: the database answered
            again = post(client, "/charges/", key)
    finally:
        private_redis.resume()
    assert len(attempts) == 1  # paused: the cache isn't tried
    assert retry.content == again.content == first.content
    assert retry["Idempotent-Replayed"] == again["Idempotent-Replayed"] == "true"
    assert len([r for r in caplog.records if "unreachable" in r.getMessage()]) == 1
