"""Adversarial review of 0.3's seams (the merged branches): each test a defect found, or
an attack that held and must keep holding."""

from __future__ import annotations

import pytest
from django.test import Client, override_settings

from idempotency_django import secret
from idempotency_django.models import IdempotencySecret
from idempotency_django.store import readonly
from tests.helpers import new_key, post


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


@pytest.mark.requires_postgres
@pytest.mark.django_db(transaction=True)
@override_settings(IDEMPOTENCY_PROTOCOL="lock", IDEMPOTENCY_WAIT=10)
def test_a_server_default_of_repeatable_read_keeps_the_inserting_claim() -> None:
    """The read-only claim needs READ COMMITTED. Django leaves the level to the server
    unless OPTIONS names one, and the server's default may be REPEATABLE READ (ALTER
    DATABASE, a role, PgBouncer's connect_query): then the claim's lookup reads on a
    snapshot taken before the lock was granted, a duplicate that waited for the holder
    finds nothing, runs the view a second time and fails on the answer's INSERT,
    instead of replaying the holder's answer."""
    import threading
    import time

    from django.db import connection, connections

    from tests.helpers import charges

    name = connection.settings_dict["NAME"]
    with connection.cursor() as cursor:
        cursor.execute(
            f'ALTER DATABASE "{name}" SET default_transaction_isolation = %s', ["repeatable read"]
        )
    connections.close_all()
    readonly._server_default.clear()  # as in a process started after the ALTER
    key, answers, replayed = new_key(), [], []

    def send() -> None:
        try:
            response = post(Client(), "/charges/", key, {"sleep": 1.0})
            answers.append(response.status_code)
            replayed.append(response.headers.get("Idempotent-Replayed"))
        finally:
            connections.close_all()

    try:
        workers = [threading.Thread(target=send) for _ in range(2)]
        workers[0].start()
        time.sleep(0.3)
        workers[1].start()
        for worker in workers:
            worker.join(30)
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f'ALTER DATABASE "{name}" RESET default_transaction_isolation')
        connections.close_all()
        readonly._server_default.clear()
    assert charges(key) == 1
    assert answers == [201, 201]
    assert replayed.count("true") == 1
