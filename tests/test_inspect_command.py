"""``manage.py inspect_idempotency``: what is held for a key, never the body unless asked."""

from __future__ import annotations

import io
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from idempotency_django.calls import namespaced
from idempotency_django.models import IdempotencyEntry
from tests.factories import IdempotencyEntryFactory

pytestmark = pytest.mark.django_db
SECRET_BODY = b'{"card": "tok_secret_4242"}'


def inspect(*args: str) -> str:
    out = io.StringIO()
    call_command("inspect_idempotency", *args, stdout=out)
    return out.getvalue()


def test_a_completed_entry_is_described_without_its_body() -> None:
    IdempotencyEntryFactory.create(
        tenant="acme", key="order-17", response_status=201, response_body=SECRET_BODY
    )
    out = inspect("order-17", "--tenant", "acme")
    assert "key:             order-17" in out
    assert "tenant:          'acme'" in out
    assert "status:          completed" in out
    assert "response status: 201 Created" in out
    assert f"body:            {len(SECRET_BODY)} bytes, application/json" in out
    assert "headers:         1" in out
    assert "protocol:" in out
    assert "expires at:" in out
    assert "(in 23:59:" in out or "(in 1 day" in out
    assert b"tok_secret".decode() not in out


def test_show_body_prints_the_stored_body() -> None:
    IdempotencyEntryFactory.create(key="order-18", response_body=SECRET_BODY)
    assert SECRET_BODY.decode() in inspect("order-18", "--show-body")


def test_a_custom_reason_phrase_is_shown() -> None:
    IdempotencyEntryFactory.create(key="k", response_status=402, response_reason="Card Declined")
    assert "response status: 402 Card Declined" in inspect("k")


def test_another_tenants_key_is_not_found() -> None:
    IdempotencyEntryFactory.create(tenant="acme", key="order-17")
    with pytest.raises(CommandError, match="No idempotency entry for key 'order-17' of tenant ''"):
        inspect("order-17")


def test_a_miss_under_the_default_tenant_points_at_tenant() -> None:
    """A user's key (``make run``'s DRF curl) looked up without --tenant: say where it is."""
    IdempotencyEntryFactory.create(tenant="1", key="demo-2")
    with pytest.raises(CommandError, match="an authenticated caller's key is under --tenant"):
        inspect("demo-2")
    with pytest.raises(CommandError) as raised:
        inspect("demo-2", "--tenant", "2")
    assert "--tenant" not in str(raised.value)


def test_a_task_key_is_found_by_scope_or_as_listed() -> None:
    IdempotencyEntryFactory.create(key=namespaced("receipts", "evt_1"))
    assert "key:             [receipts] evt_1" in inspect("evt_1", "--scope", "receipts")
    assert "key:             [receipts] evt_1" in inspect("[receipts] evt_1")
    with pytest.raises(CommandError):
        inspect("evt_1")


def test_an_expired_entry_says_it_counts_as_absent() -> None:
    IdempotencyEntryFactory.create(key="old", expired=True)
    assert "(expired: treated as absent)" in inspect("old")


def test_an_in_progress_entry_shows_its_lease_and_protocol() -> None:
    IdempotencyEntryFactory.create(key="running", in_progress=True)
    out = inspect("running")
    assert "status:          in_progress" in out
    assert "(lease running)" in out
    assert "response status: -" in out
    assert "body:            -" in out
    assert "protocol:        lease" in out


def test_release_frees_an_abandoned_claim() -> None:
    IdempotencyEntryFactory.create(key="stuck", abandoned=True)
    out = inspect("stuck", "--release")
    assert "(lease passed: releasable)" in out
    assert "Released: the key behaves as new." in out
    assert not IdempotencyEntry.objects.filter(key="stuck").exists()


def test_release_refuses_a_running_claim() -> None:
    IdempotencyEntryFactory.create(key="running", in_progress=True)
    with pytest.raises(CommandError, match="lease has not passed"):
        inspect("running", "--release")
    assert IdempotencyEntry.objects.filter(key="running").exists()


def test_release_refuses_a_final_entry() -> None:
    IdempotencyEntryFactory.create(key="done")
    with pytest.raises(CommandError, match="the entry is final"):
        inspect("done", "--release")
    assert IdempotencyEntry.objects.filter(key="done").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["k", "--database", "nowhere"], "--database 'nowhere' is not an alias"),
        ([""], "must not be empty"),
        (["k", "--scope", "a\x1fb"], "scope must be a non-empty name"),
        (["missing"], "No idempotency entry"),
    ],
)
def test_bad_arguments_are_command_errors(args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        inspect(*args)


def test_times_are_the_databases() -> None:
    entry = IdempotencyEntryFactory.create(
        key="later", expires_at=timezone.now() + timedelta(hours=2)
    )
    out = inspect("later")
    assert entry.expires_at.isoformat() in out
    assert "(in 1:59:" in out or "(in 2:00:" in out


@pytest.mark.requires_postgres
def test_a_lock_protocol_request_in_flight_is_reported() -> None:
    import psycopg

    from tests.lock_helpers import dsn, lock_id

    with pytest.raises(CommandError) as nothing_held:
        inspect("in-flight", "--tenant", "acme")
    assert "in flight" not in str(nothing_held.value)
    with psycopg.connect(dsn()) as holder:  # a transaction holding the key's lock
        holder.execute(
            "SELECT pg_advisory_xact_lock(%s::bigint)",
            [lock_id("in-flight", "acme")],
        )
        with pytest.raises(CommandError, match="A request holding its lock is in flight"):
            inspect("in-flight", "--tenant", "acme")
        holder.rollback()


def test_an_unknown_status_code_and_no_body() -> None:
    IdempotencyEntryFactory.create(key="odd", response_status=599, response_reason="")
    assert "response status: 599\n" in inspect("odd")
    IdempotencyEntryFactory.create(key="none", in_progress=True)
    assert inspect("none", "--show-body").endswith("(no stored body)\n")


def test_the_protocol_is_unknown_when_the_configuration_is_wrong(settings: Any) -> None:
    from django.db import connection

    if connection.vendor == "postgresql":
        pytest.skip('"lock" is valid on PostgreSQL')
    settings.IDEMPOTENCY_PROTOCOL = "lock"  # check E013 reports it
    IdempotencyEntryFactory.create(key="done")
    assert "protocol:        unknown" in inspect("done")


def test_a_ninja_api_keys_entry_is_found_by_its_credential(monkeypatch: Any) -> None:
    """Ninja stores an API-key caller under a keyed digest: --tenant can't name it."""
    from idempotency_django.ninja import principal_tenant

    IdempotencyEntryFactory.create(tenant=principal_tenant("key-alice"), key="n1")
    with pytest.raises(CommandError):
        inspect("n1", "--tenant", "key-alice")
    out = inspect("n1", "--credential", "key-alice")
    assert "key:             n1" in out
    assert "key-alice" not in out  # the credential is never printed
    monkeypatch.setattr("sys.stdin", io.StringIO("key-alice\n"))
    assert "key:             n1" in inspect("n1", "--credential", "-")
    with pytest.raises(CommandError):
        inspect("n1", "--credential", "key-bob")


@pytest.mark.parametrize("stdin", ["\n", ""], ids=["blank line", "end of input"])
def test_an_empty_credential_is_a_command_error_not_a_lookup(monkeypatch: Any, stdin: str) -> None:
    IdempotencyEntryFactory.create(key="n1")  # under the empty tenant: must not be found
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    with pytest.raises(CommandError, match="The credential must not be empty"):
        inspect("n1", "--credential", "-")
    with pytest.raises(CommandError, match="The credential must not be empty"):
        inspect("n1", "--credential", "")


def test_a_credential_without_django_ninja_names_what_it_needs(monkeypatch: Any) -> None:
    import sys

    IdempotencyEntryFactory.create(key="n1")
    monkeypatch.setitem(sys.modules, "idempotency_django.ninja", None)  # as if not installed
    with pytest.raises(CommandError, match="--credential needs Django Ninja"):
        inspect("n1", "--credential", "key-alice")


def test_a_body_that_is_not_utf8_is_shown_escaped() -> None:
    IdempotencyEntryFactory.create(key="bin", response_body=b"caf\xe9 \xff")
    assert inspect("bin", "--show-body").endswith("\n\ncaf\\xe9 \\xff\n")
