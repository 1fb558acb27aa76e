"""The server secret: derived keys, lock ids and key digests keyed with it, persisted once and
never rewritten, even when the claim that first reads it rolls back."""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

import psycopg
import pytest
from celery import Celery
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import Client, override_settings

from idempotency_django import signals
from idempotency_django._operations.checks import check_secret, check_secret_fallbacks
from idempotency_django._storage import secret
from idempotency_django._storage.secret import lock_id, server_secret
from idempotency_django.celery import idempotent_task
from idempotency_django.models import IdempotencyDatabase, IdempotencySecret
from tests.helpers import new_key, post
from tests.lock_helpers import dsn
from tests.testapp.models import Charge

app = Celery("idempotency_django_secret", set_as_current=False)


@app.task(bind=True, name="secret.logged")
@idempotent_task(key=lambda reference: f"order-{reference}")
def logged(self: Any, reference: str) -> str:
    Charge.objects.create(reference=reference, amount=1)
    return reference


def _unkeyed_lock_id(tenant: str, key: str) -> int:
    with psycopg.connect(dsn(), autocommit=True) as conn:
        row = conn.execute(
            "SELECT hashtextextended(%s, 0)", (f"idempotency_django\x1f{tenant}\x1f{key}",)
        ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.requires_postgres
@pytest.mark.django_db(transaction=True)
@override_settings(IDEMPOTENCY_PROTOCOL="lock")
def test_the_unkeyed_lock_id_of_a_victims_key_holds_nothing() -> None:
    """0.2.0's lock id was hashtextextended(text, 0): anyone could compute (and collide) it.

    Holding that id must not make the victim's request busy: the id is keyed now.
    """
    key = new_key()
    with psycopg.connect(dsn()) as attacker:
        attacker.execute("SELECT pg_advisory_xact_lock(%s)", (_unkeyed_lock_id("", key),))
        response = post(Client(raise_request_exception=False), "/charges/", key)
    assert response.status_code == 201


@pytest.mark.django_db
def test_the_lock_id_is_keyed_with_the_server_secret() -> None:
    first = lock_id("default", "t", "order-1001")
    assert -(2**63) <= first < 2**63
    assert lock_id("default", "t", "order-1001") == first
    assert lock_id("default", "u", "order-1001") != first
    with override_settings(IDEMPOTENCY_SECRET="x" * 40):
        assert lock_id("default", "t", "order-1001") != first


@pytest.mark.django_db
def test_key_digest_is_keyed() -> None:
    unkeyed = hashlib.sha256(json.dumps(["t", "1234"]).encode()).hexdigest()[:12]
    digest = signals.key_digest("t", "1234")
    assert digest != unkeyed
    assert len(digest) == 12
    with override_settings(IDEMPOTENCY_SECRET="y" * 40):
        assert signals.key_digest("t", "1234") != digest


@pytest.mark.django_db(transaction=True)
def test_no_log_line_of_a_task_holds_its_key(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    for _ in range(2):  # the run, then a replay
        assert logged.apply(args=("r-secret-9",), task_id="task-id-secret").get() == "r-secret-9"
    ours = [record for record in caplog.records if record.name.startswith("idempotency_django")]
    lines = [record.getMessage() for record in ours] + [repr(vars(record)) for record in ours]
    assert lines
    assert not [line for line in lines if "order-r-secret-9" in line or "task-id-secret" in line]


@pytest.mark.django_db(transaction=True)
def test_the_secret_row_is_written_once_and_never_rewritten() -> None:
    stored = IdempotencySecret.objects.get().value
    with override_settings(SECRET_KEY="rotated", SECRET_KEY_FALLBACKS=[]):
        assert server_secret().hex() == stored
        call_command("migrate", verbosity=0)
    assert IdempotencySecret.objects.get().value == stored


def test_idempotency_secret_check() -> None:
    assert check_secret("s" * 32) == []
    for bad in ("short", 12, ""):
        (error,) = check_secret(bad)
        assert error.id == "idempotency_django.E020"


@pytest.mark.django_db  # Django 6.1's check command also checks the database.
def test_idempotency_secret_fallbacks_check() -> None:
    assert check_secret_fallbacks([]) == []
    assert check_secret_fallbacks(("an old SECRET_KEY",)) == []
    for bad in ("a string, not a list", [""], [12], None):
        (error,) = check_secret_fallbacks(bad)
        assert error.id == "idempotency_django.E021"
    with (
        override_settings(IDEMPOTENCY_SECRET_FALLBACKS="x"),
        pytest.raises(SystemCheckError, match="E021"),
    ):
        call_command("check")


def test_a_bad_idempotency_secret_fails_manage_check() -> None:
    from django.core.management.base import SystemCheckError

    with override_settings(IDEMPOTENCY_SECRET="short"), pytest.raises(SystemCheckError):
        call_command("check")


@pytest.mark.requires_postgres
@pytest.mark.django_db(transaction=True)
@override_settings(IDEMPOTENCY_PROTOCOL="lock", IDEMPOTENCY_SECRET=None)
def test_a_secret_first_read_in_a_rolled_back_claim_is_persisted() -> None:
    """The first claim of a process can be the one to persist the server secret, inside
    the view's transaction. That transaction may roll back (a 503 here): the secret the
    process went on using (cached, its lock ids and derived keys) must be the committed
    one, or a server started after a SECRET_KEY rotation persists another one and a retry
    gets another derived key (a second charge at the payment provider)."""
    IdempotencySecret.objects.all().delete()
    secret._cache.clear()
    response = post(Client(), "/charges/", new_key(), {"status": 503})
    assert response.status_code == 503
    used = secret._cache["default"]
    assert IdempotencySecret.objects.filter(pk=1).exists()
    # Another server, its SECRET_KEY rotated and the fallback dropped, reads the row.
    with override_settings(SECRET_KEY="rotated-" + "z" * 50, SECRET_KEY_FALLBACKS=[]):
        assert secret.server_secret("default") == used


@pytest.mark.requires_postgres
@pytest.mark.django_db(transaction=True)
@override_settings(IDEMPOTENCY_PROTOCOL="lock")
def test_two_servers_with_different_lock_ids_still_commit_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Attack on the read-only claim: two servers whose lock ids differ (their secrets
    disagree) both pass the advisory lock and both run the view; the answer's INSERT …
    ON CONFLICT must then refuse the second with a 409 and roll its writes back."""
    import threading

    from django.db import connections

    from tests.helpers import charges

    real = secret.lock_id
    monkeypatch.setattr(
        secret, "lock_id", lambda *a: real(*a) ^ (threading.get_ident() & 0xFFFF) or 1
    )
    key, answers = new_key(), []

    def send() -> None:
        try:
            answers.append(post(Client(), "/charges/", key, {"sleep": 0.5}).status_code)
        finally:
            connections.close_all()

    workers = [threading.Thread(target=send) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)
    assert sorted(answers) in ([201, 201], [201, 409])  # a replay, or the loser's 409
    assert charges(key) == 1


@pytest.mark.django_db(transaction=True)
def test_the_database_identity_is_random_and_persisted_once() -> None:
    identity = secret.row_identity("default")
    assert bytes.fromhex(IdempotencyDatabase.objects.get().identity) == identity
    with override_settings(SECRET_KEY="rotated", SECRET_KEY_FALLBACKS=[]):
        assert secret.row_identity("default") == identity  # not a function of settings
        call_command("migrate", verbosity=0)
    assert bytes.fromhex(IdempotencyDatabase.objects.get().identity) == identity
    IdempotencyDatabase.objects.all().delete()  # another database, created on its own
    secret._cache.clear()
    other = secret.row_identity("default")
    assert other != identity
    assert len(other) == 16
    IdempotencyDatabase.objects.filter(pk=1).update(identity=identity.hex())
    secret._cache.clear()


@pytest.mark.django_db(transaction=True)
def test_a_flushed_test_database_gets_this_processs_identity_back() -> None:
    """A flush sends post_migrate: the identity this process (and any server started
    on the same database) already uses is written back, not a new one drawn."""
    identity = secret.row_identity("default")
    IdempotencyDatabase.objects.all().delete()
    secret.on_post_migrate("default")
    assert bytes.fromhex(IdempotencyDatabase.objects.get().identity) == identity


def test_the_settings_roots_are_not_what_the_secret_row_holds() -> None:
    """The row holds sha256(seed + the oldest key): no root of a seal key follows from it."""
    with override_settings(SECRET_KEY="k" * 50, SECRET_KEY_FALLBACKS=["old" * 20]):
        roots = secret.settings_roots()
        assert len(roots) == 2
        assert secret.seed_from_settings() not in roots
    with override_settings(IDEMPOTENCY_SECRET="s" * 40):
        assert secret.settings_roots() != [secret.seed_from_settings()]
        assert len(secret.settings_roots()) == 1
