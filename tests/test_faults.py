"""Database faults at the worst moments, injected in-process (the gunicorn tier does it for real).

A COMMIT whose acknowledgement is lost (the connection drops just after the
server committed) is the case a naive "release on any error" gets wrong: the
answer and the business write are committed, so the key must not be freed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import OperationalError, connection
from django.test import Client

from idempotency_django._storage.store import carry
from idempotency_django.models import IdempotencyEntry
from tests.helpers import charges, new_key, post

pytestmark = pytest.mark.django_db(transaction=True)


def _commit_then_fail(real_commit: Callable[[], Any]) -> Callable[[], Any]:
    def commit() -> Any:
        real_commit()
        raise OperationalError("server closed the connection unexpectedly")

    return commit


def test_lost_commit_acknowledgement_keeps_the_answer() -> None:
    client = Client(raise_request_exception=False)
    key = new_key()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(connection, "commit", _commit_then_fail(connection.commit))
        assert post(client, "/charges/", key).status_code == 500
    assert charges(key) == 1
    assert IdempotencyEntry.objects.get(key=key).status == IdempotencyEntry.Status.COMPLETED
    retry = post(client, "/charges/", key)
    assert retry.status_code == 201
    assert retry["Idempotent-Replayed"] == "true"
    assert charges(key) == 1


def test_failed_commit_frees_the_key() -> None:
    client = Client(raise_request_exception=False)
    key = new_key()

    def commit() -> None:
        raise OperationalError("could not commit")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(connection, "commit", commit)
        # Django's own COMMIT, not one carried by the record (a failure there fails the
        # record's statement: tests/test_retryable_failures.py).
        patch.setattr(carry, "carry_commit", lambda conn: False)
        assert post(client, "/charges/", key).status_code == 500
    assert charges(key) == 0
    assert not IdempotencyEntry.objects.filter(key=key).exists()
    assert post(client, "/charges/", key).status_code == 201
    assert charges(key) == 1


@pytest.mark.parametrize("release_fails", [False, True], ids=["released", "release-fails"])
def test_a_lease_claim_taken_over_before_its_lock_is_a_409_and_runs_nothing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, release_fails: bool
) -> None:
    """Between the lease claim (autocommit) and the row lock another request took the key."""
    from django.test import override_settings

    from idempotency_django._storage.store import lease

    monkeypatch.setattr(lease, "hold", lambda *args: False)
    if release_fails:
        lost = OperationalError("server closed the connection unexpectedly")
        monkeypatch.setattr(lease, "release", lambda claim: _raise(lost))
    client = Client(raise_request_exception=False)
    key = new_key()
    with override_settings(IDEMPOTENCY_PROTOCOL="lease"):
        refused = post(client, "/charges/", key)
    assert refused.status_code == 409
    assert charges(key) == 0
    left = IdempotencyEntry.objects.filter(key=key)
    if release_fails:
        # Our claim's row stays until its lease passes: the key is never freed early.
        assert "could not release an idempotency claim; its lease will expire" in caplog.text
        assert left.get().status == IdempotencyEntry.Status.IN_PROGRESS
    else:
        assert not left.exists()  # our claim released: the key behaves as new


def _raise(error: BaseException) -> None:
    raise error
