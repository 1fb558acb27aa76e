"""The entries' database follows the request; writes elsewhere are caught; replicas are
never read; purge, relay and the admin reach every shard."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connections
from django.test import Client, override_settings
from django.utils import timezone

from idempotency_django import databases, signals
from idempotency_django.models import IdempotencyEntry
from tests.helpers import new_key
from tests.testapp.models import Charge

ALL = ["default", "shard1", "replica"]
# The lock protocol is PostgreSQL's: not collected on SQLite (a skip would fail CI).
PROTOCOLS = (
    ["lease", "lock"]
    if settings.DATABASES["default"]["ENGINE"].endswith("postgresql")
    else ["lease"]
)
pytestmark = pytest.mark.django_db(transaction=True, databases=ALL)


def send(path: str, tenant: str, key: str, ref: str, **body: Any) -> Any:
    return Client(raise_request_exception=False).post(
        path,
        json.dumps(body or {"amount": 1}),
        content_type="application/json",
        headers={"Idempotency-Key": key, "X-Tenant": tenant, "X-Ref": ref},
    )


def on(alias: str, ref: str) -> int:
    return Charge.objects.using(alias).filter(reference=ref).count()


def entries(alias: str, tenant: str) -> int:
    return IdempotencyEntry.objects.using(alias).filter(tenant=tenant).count()


@pytest.mark.parametrize("path", ["/sharded/charges/", "/sharded/api/charges/"])
@pytest.mark.parametrize(
    ("tenant", "shard", "other"), [("a-1", "default", "shard1"), ("b-1", "shard1", "default")]
)
def test_the_entry_sits_in_its_tenants_shard_beside_the_business_row(
    path: str, tenant: str, shard: str, other: str
) -> None:
    key = new_key()
    first = send(path, tenant, key, "r1")
    again = send(path, tenant, key, "r1")
    assert first.status_code == again.status_code == 201
    assert json.loads(first.content)["shard"] == shard
    assert again["Idempotent-Replayed"] == "true"
    assert (on(shard, "r1"), on(other, "r1")) == (1, 0)
    assert (entries(shard, tenant), entries(other, tenant)) == (1, 0)


def test_the_decorators_database_option_takes_a_dotted_path() -> None:
    from idempotency_django import idempotent

    @idempotent(database="tests.multidb.routing.shard")
    def view(request: Any) -> Any:
        from django.http import HttpResponse

        return HttpResponse(status=201)

    from django.test import RequestFactory

    request = RequestFactory().post(
        "/",
        b"{}",
        content_type="application/json",
        headers={"Idempotency-Key": "k", "X-Tenant": "b-2"},
    )
    request.user = User(pk=1)
    assert view(request).status_code == 201
    assert entries("shard1", "b-2") == 1


def test_a_chooser_answering_no_alias_is_a_loud_error() -> None:
    with pytest.raises(Exception, match="returned 'nowhere', not an alias"):
        databases.entries_alias(lambda request: "nowhere", object())  # type: ignore[arg-type]


def test_outside_a_request_a_chooser_needs_the_database_named() -> None:

    with pytest.raises(Exception, match="name the database explicitly"):
        databases.default_alias()


# (2) The case: the entry in default, the charge in shard1, a 500, sent twice.


@pytest.mark.parametrize("path", ["/two-databases/charges/", "/two-databases/async/"])
def test_a_write_to_another_database_is_refused_in_tests_and_never_runs(path: str) -> None:
    key = new_key()
    for _ in range(2):
        response = send(path, "a-1", key, "twice")
        assert response.status_code == 500
    assert on("shard1", "twice") == 0  # refused before the INSERT ran: no charge at all
    assert entries("default", "a-1") == 0


def test_the_refusal_names_the_alias_and_the_fix() -> None:
    client = Client(raise_request_exception=True)
    with pytest.raises(databases.UncoveredWrite) as caught:
        client.post(
            "/two-databases/charges/",
            "{}",
            content_type="application/json",
            headers={"Idempotency-Key": new_key(), "X-Tenant": "a-1", "X-Ref": "x"},
        )
    message = str(caught.value)
    assert "'shard1'" in message
    assert "'default'" in message
    assert "IDEMPOTENCY_DATABASE" in message
    assert "uncovered(" in message


def test_in_production_it_runs_with_a_warning_and_a_signal(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(databases, "refusing", lambda: False)
    seen: list[dict[str, Any]] = []

    def receiver(sender: object, **kwargs: Any) -> None:
        seen.append({"sender": sender, "alias": kwargs["alias"], "database": kwargs["database"]})

    signals.uncovered_write.connect(receiver)
    try:
        key = new_key()
        for _ in range(2):
            assert send("/two-databases/charges/", "a-1", key, "prod").status_code == 500
    finally:
        signals.uncovered_write.disconnect(receiver)
    # Not covered (as documented), but never silent: one report per request.
    assert on("shard1", "prod") == 2
    assert seen == [{"sender": "http", "alias": "shard1", "database": "default"}] * 2
    assert sum("wrote to the database 'shard1'" in r.getMessage() for r in caplog.records) == 2


def test_refusing_follows_debug_and_the_test_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from django.core import mail

    assert databases.refusing()  # pytest-django set up the test environment
    monkeypatch.delattr(mail, "outbox")
    assert not databases.refusing()
    with override_settings(DEBUG=True):
        assert databases.refusing()


def test_an_idempotent_call_on_another_database_is_covered_by_its_own_key() -> None:
    for key in (new_key(), new_key()):  # two requests, one ledger call
        assert send("/two-databases/nested-call/", "a-1", key, "ledger-1").status_code == 201
    assert on("shard1", "ledger-1") == 1


def test_writes_declared_uncovered_pass() -> None:
    key = new_key()
    assert send("/two-databases/uncovered/", "a-1", key, "audit").status_code == 201
    assert send("/two-databases/uncovered/", "a-1", key, "audit").status_code == 201
    assert (on("shard1", "audit"), on("default", "audit")) == (1, 1)


@pytest.mark.parametrize(
    ("sql", "write"),
    [
        ("INSERT INTO t VALUES (1)", True),
        ("  update t set a = 1", True),
        ("DELETE FROM t", True),
        ("WITH x AS (SELECT 1) INSERT INTO t SELECT * FROM x", True),
        ("SELECT * FROM t FOR UPDATE", False),
        ("WITH x AS (SELECT 1) SELECT * FROM x", False),
        ("SAVEPOINT s1", False),
    ],
)
def test_what_counts_as_a_write(sql: str, write: bool) -> None:
    assert databases.is_write(sql) is write


# (3) Replicas


@override_settings(
    DATABASE_ROUTERS=["tests.multidb.routing.ReplicaRouter"], IDEMPOTENCY_DATABASE="default"
)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_replica_router_never_serves_a_claim_or_a_replay(protocol: str) -> None:
    key = new_key()
    with override_settings(IDEMPOTENCY_PROTOCOL=protocol):
        first = send("/replica/charges/", "a-1", key, "rep")
        again = send("/replica/charges/", "a-1", key, "rep")
        other = send("/replica/charges/", "a-1", key, "rep", amount=2)
    assert first.status_code == again.status_code == 201
    assert again["Idempotent-Replayed"] == "true"
    assert again.content == first.content
    assert other.status_code == 422
    assert Charge.objects.using("default").filter(reference="rep").count() == 1
    assert IdempotencyEntry.objects.using("replica").count() == 0
    assert Charge.objects.count() == 0  # reads do go to the (lagging) replica


# (1) purge, relay and the admin reach every shard


def _expire_everything() -> None:
    for alias in ("default", "shard1"):
        IdempotencyEntry.objects.using(alias).update(
            expires_at=timezone.now() - timedelta(seconds=1)
        )


def test_purge_cleans_every_shard_by_default() -> None:
    send("/sharded/charges/", "a-1", new_key(), "p")
    send("/sharded/charges/", "b-1", new_key(), "p")
    _expire_everything()
    out = StringIO()
    call_command("purge_idempotency", stdout=out)
    lines = out.getvalue().splitlines()
    assert "Deleted 1 expired and 0 abandoned in-progress entries from 'default'." in lines
    assert "Deleted 1 expired and 0 abandoned in-progress entries from 'shard1'." in lines
    assert not any(IdempotencyEntry.objects.using(a).exists() for a in ALL)


def test_purge_of_one_database_leaves_the_others() -> None:
    send("/sharded/charges/", "a-1", new_key(), "p")
    send("/sharded/charges/", "b-1", new_key(), "p")
    _expire_everything()
    call_command("purge_idempotency", "--database", "shard1", stdout=StringIO())
    assert (entries("default", "a-1"), entries("shard1", "b-1")) == (1, 0)


def test_the_purge_task_sums_every_shard() -> None:
    from idempotency_django.tasks import purge_idempotency

    send("/sharded/charges/", "a-1", new_key(), "p")
    send("/sharded/charges/", "b-1", new_key(), "p")
    _expire_everything()
    assert purge_idempotency() == {"expired": 2, "abandoned": 0}


def test_every_alias_that_holds_entries(monkeypatch: pytest.MonkeyPatch) -> None:
    from django.conf import settings

    # The routers allow the table everywhere; all three databases have it.
    assert databases.possible_aliases() == ALL
    assert databases.holding_aliases() == ALL
    replica = {**settings.DATABASES["replica"], "TEST": {"MIRROR": "default"}}
    monkeypatch.setitem(settings.DATABASES, "replica", replica)
    assert "replica" not in databases.possible_aliases()


def test_relay_runs_on_every_database() -> None:
    out = StringIO()
    call_command("relay_outbox", stdout=out)
    assert out.getvalue().splitlines() == [f"outbox ({alias}): 0 sent, 0 failed" for alias in ALL]


def test_the_admin_lists_each_shard(admin_client: Client) -> None:
    send("/sharded/charges/", "b-7", new_key(), "adm")
    url = "/admin/idempotency_django/idempotencyentry/"
    assert b"b-7" not in admin_client.get(url).content
    page = admin_client.get(url, {"database": "shard1"})
    assert page.status_code == 200
    assert b"b-7" in page.content
    entry = IdempotencyEntry.objects.using("shard1").get(tenant="b-7")
    detail = admin_client.get(
        f"{url}{entry.pk}/change/", {"_changelist_filters": "database=shard1"}
    )
    assert detail.status_code == 200
    assert b"b-7" in detail.content


def test_atomic_requests_leaves_every_shard_to_a_view_choosing_per_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from django.core.handlers.base import BaseHandler

    from tests.multidb import views

    for alias in ALL:
        monkeypatch.setitem(connections.settings[alias], "ATOMIC_REQUESTS", True)
    # Django decides before the request which databases to wrap: none of the shards
    # the chooser may pick (the view opens that transaction itself, claim first).
    assert BaseHandler().make_view_atomic(views.sharded_charge) is views.sharded_charge
    key = new_key()
    assert send("/sharded/charges/", "b-3", key, "atomic").status_code == 201
    assert send("/sharded/charges/", "b-3", key, "atomic")["Idempotent-Replayed"] == "true"
    assert on("shard1", "atomic") == 1


def test_the_outbox_admin_and_metrics_reach_each_shard(admin_client: Client) -> None:
    from django.urls import reverse

    from idempotency_django.outbox.models import OutboxMessage
    from idempotency_django.outbox.prometheus import OutboxCollector

    OutboxMessage.objects.using("shard1").create(key="k-shard1", task="t", args=[], kwargs={})
    url = reverse(f"admin:{OutboxMessage._meta.app_label}_outboxmessage_changelist")
    assert b"k-shard1" not in admin_client.get(url).content
    assert b"k-shard1" in admin_client.get(url, {"database": "shard1"}).content
    gauges = {family.name: family.samples[0].value for family in OutboxCollector().collect()}
    assert gauges["idempotency_outbox_pending"] == 1
