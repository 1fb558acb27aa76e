"""The server secret's first persist commits in a transaction of its own, never in a view's.

A view's transaction may roll back (a 500): if the secret's first persist was in
it, the row is taken back while the process goes on using the value, and a server
started after a ``SECRET_KEY`` rotation persists another one: a retry then gets
another derived key (a second charge at the payment provider). 0.3 fixed this for
the "lock" protocol's claim only.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.test import Client, override_settings
from django.urls import path

from idempotency_django import idempotent
from idempotency_django._storage import secret
from idempotency_django.models import IdempotencySecret
from tests.conftest import database_vendor
from tests.helpers import new_key, post

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls(__name__)]
ROTATED = {"SECRET_KEY": "rotated-" + "z" * 50, "SECRET_KEY_FALLBACKS": []}


@idempotent(protocol="lease")
def derives_then_fails(request: HttpRequest) -> JsonResponse:
    derived = request.idempotency.derive("payments")  # type: ignore[attr-defined]
    return JsonResponse({"derived": derived}, status=500)


urlpatterns = [path("charges/", derives_then_fails)]


@pytest.fixture
def no_secret_yet() -> Iterator[None]:
    """As on a database whose secret row is missing, in a process that never read it."""
    with override_settings(IDEMPOTENCY_SECRET=None):
        IdempotencySecret.objects.all().delete()
        secret._cache.clear()
        yield
    secret._cache.clear()


def test_a_secret_first_used_in_a_rolled_back_lease_view_stays_persisted(
    no_secret_yet: None,
) -> None:
    assert post(Client(raise_request_exception=False), "/charges/", new_key()).status_code == 500

    used = secret._cache["default"]
    assert IdempotencySecret.objects.filter(pk=1).exists()
    with override_settings(**ROTATED):  # another server, its SECRET_KEY rotated
        assert secret.server_secret("default") == used


@pytest.mark.requires_server
def test_a_secret_first_read_in_a_callers_transaction_commits_on_its_own(
    no_secret_yet: None,
) -> None:
    with transaction.atomic():
        used = secret.server_secret("default")
        transaction.set_rollback(True)

    assert bytes.fromhex(IdempotencySecret.objects.get(pk=1).value) == used
    assert secret._cache["default"] == used


# SQLite has one writer, and a caller's transaction may be it: there the row is written
# in that transaction and kept only once it commits (servers are tested above).
if database_vendor() == "sqlite":

    def test_on_sqlite_a_secret_written_in_a_rolled_back_transaction_is_not_kept(
        no_secret_yet: None,
    ) -> None:
        with transaction.atomic():
            secret.server_secret("default")
            transaction.set_rollback(True)

        assert "default" not in secret._cache
        assert not IdempotencySecret.objects.exists()
        with override_settings(**ROTATED):
            rotated = secret.server_secret("default")
        assert bytes.fromhex(IdempotencySecret.objects.get(pk=1).value) == rotated


@pytest.mark.requires_server
def test_a_callers_transaction_holding_the_secret_row_is_read_in_that_transaction(
    no_secret_yet: None,
) -> None:
    """The connection apart would wait on the caller's own uncommitted row: it gives up
    (a bounded lock wait, not a hang), and the value is read in the caller's transaction."""
    with transaction.atomic():
        secret.ensure_row("default")  # the caller's transaction holds the row
        used = secret.server_secret("default")
    assert secret._cache["default"] == used
    assert bytes.fromhex(IdempotencySecret.objects.get(pk=1).value) == used


def test_a_secret_row_found_inside_a_callers_transaction_is_kept_at_once() -> None:
    """Only a row written in the caller's transaction waits for its commit: one already
    there is read once, so that an async view's derive() never queries from its loop."""
    with override_settings(IDEMPOTENCY_SECRET=None):
        secret._cache.clear()
        with transaction.atomic():
            used = secret.server_secret("default")
            assert secret._cache["default"] == used
    assert bytes.fromhex(IdempotencySecret.objects.get(pk=1).value) == used
