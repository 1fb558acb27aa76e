"""A copy of the entries database is another database: the server says so, not a row.

Customers' databases made with ``CREATE DATABASE … TEMPLATE`` (or a dump restored as
another database, or an SQLite file copied) carry the origin's identity row. 0.5 took
that row for the database's identity: with a database chosen per request and one
shared Redis, customer bolt's user was replayed customer acme's cached answer (acme's
charge) and bolt's view never ran; a row copied between the two (the identity row is
copied already) opened. The identity is now what the database's server knows it by,
bound with the row: each copy, made as its vendor can make one, is checked here.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from django.db import connections
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.test import Client, override_settings
from django.urls import path
from psycopg import sql

from idempotency_django import idempotent
from idempotency_django._storage import cache, secret
from idempotency_django.models import IdempotencyDatabase, IdempotencyEntry
from tests.conftest import database_vendor
from tests.helpers import new_key, problem
from tests.lock_helpers import dsn
from tests.system.harness import with_database
from tests.testapp.models import Charge

COPY = "bolt"  # acme's is "default"
pytestmark = [
    # The copy's alias exists from its module fixture on, before a test's own setup.
    pytest.mark.django_db(transaction=True, databases=["default", COPY]),
    pytest.mark.urls(__name__),
]


def customer_database(request: HttpRequest) -> str:
    return request.headers["X-Database"]


def user(request: HttpRequest) -> str:
    return "1"  # user pks start at 1 in each customer's database


@idempotent(database=customer_database, tenant=user, cache="replay")
def charge(request: HttpRequest) -> HttpResponse:
    database = customer_database(request)
    made = Charge.objects.using(database).create(reference=request.headers["X-Ref"], amount=1)
    return JsonResponse({"database": database, "charge": made.pk}, status=201)


urlpatterns = [path("charges/", charge)]


def send(database: str, key: str) -> Any:
    return Client(raise_request_exception=False).post(
        "/charges/",
        json.dumps({"amount": 1}),
        content_type="application/json",
        headers={"Idempotency-Key": key, "X-Database": database, "X-Ref": f"{database}:{key}"},
    )


# -- copies, as each vendor makes them ---------------------------------------------------


def origin_name() -> str:
    return str(connections["default"].settings_dict["NAME"])


def pg_admin(statement: str, *names: str) -> None:
    with psycopg.connect(with_database(dsn(), "postgres"), autocommit=True) as admin:
        admin.execute(sql.SQL(statement).format(*map(sql.Identifier, names)))


def pg_dump_restored(source: str, target: str) -> None:
    pg_admin("CREATE DATABASE {}", target)
    # The tables these tests use: the whole test database takes seconds more.
    tables = ["-t", "idempotency_django_*", "-t", "testapp_*"]
    dump = ["pg_dump", "--no-owner", *tables, with_database(dsn(), source)]
    dumped = subprocess.run(dump, check=True, capture_output=True).stdout
    restore = ["psql", "-q", "-v", "ON_ERROR_STOP=1", with_database(dsn(), target)]
    subprocess.run(restore, input=dumped, check=True, capture_output=True)


def pg_template_clone(source: str, target: str) -> None:
    """Cloned from a scratch copy of the test database: nobody may be connected to a
    template, and this process's own connections to the test database stay open."""
    scratch = f"{target}_template"
    pg_dump_restored(source, scratch)
    pg_admin("CREATE DATABASE {} TEMPLATE {}", target, scratch)
    pg_admin("DROP DATABASE {}", scratch)


def pg_drop(name: str) -> None:
    pg_admin("DROP DATABASE IF EXISTS {} WITH (FORCE)", name)


def mysql_client(program: str) -> list[str]:
    db = connections["default"].settings_dict
    found = [program, "-h", str(db["HOST"] or "127.0.0.1"), "-P", str(db["PORT"] or 3306)]
    found += ["-u", str(db["USER"] or "root")]
    return found + ([f"-p{db['PASSWORD']}"] if db.get("PASSWORD") else [])


def mysql_dump_restored(source: str, target: str) -> None:
    with connections["default"].cursor() as cursor:
        cursor.execute(f"CREATE DATABASE `{target}`")
    dumped = subprocess.run([*mysql_client("mysqldump"), source], check=True, capture_output=True)
    subprocess.run([*mysql_client("mysql"), target], input=dumped.stdout, check=True)


def mysql_drop(name: str) -> None:
    with connections["default"].cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")


def sqlite_file_copied(source: str, target: str) -> None:
    with sqlite3.connect(source) as origin, sqlite3.connect(target) as copied:
        origin.backup(copied)


def sqlite_drop(name: str) -> None:
    if os.path.exists(name):
        os.remove(name)


Copier = tuple[Callable[[str, str], None], Callable[[str], None]]
BY_VENDOR: dict[str, dict[str, Copier]] = {
    "postgresql": {
        "template clone": (pg_template_clone, pg_drop),
        "dump restored as another database": (pg_dump_restored, pg_drop),
    },
    "mysql": {"dump restored as another database": (mysql_dump_restored, mysql_drop)},
    "sqlite": {"file copied": (sqlite_file_copied, sqlite_drop)},
}
COPIES = BY_VENDOR[database_vendor()]


@pytest.fixture(scope="module", params=sorted(COPIES))
def copied(
    request: pytest.FixtureRequest, django_db_setup: None, django_db_blocker: Any
) -> Iterator[str]:
    """Alias :data:`COPY`: a copy of the test database (alias ``default``) made as
    ``param`` says, before any entry of these tests is written; one per module."""
    make, drop = COPIES[request.param]
    with django_db_blocker.unblock():
        name = origin_name() + ("-copy.sqlite3" if database_vendor() == "sqlite" else "_copy")
        drop(name)
        make(origin_name(), name)
        connections.settings[COPY] = {**connections["default"].settings_dict, "NAME": name}
        try:
            yield request.param
        finally:
            connections[COPY].close()
            del connections[COPY]
            del connections.settings[COPY]
            forget(COPY)
            drop(name)


@pytest.fixture
def copy(copied: str) -> str:
    """The copy as it was made, for each test: its identity row the origin's (a test's
    teardown flushes it and draws another)."""
    copied_row = {"identity": identity_row("default")}
    IdempotencyDatabase.objects.using(COPY).update_or_create(pk=1, defaults=copied_row)
    forget(COPY)
    return copied


def forget(alias: str) -> None:
    """This process's memory of ``alias``'s identity (read once per process) let go."""
    for slot in [slot for slot in secret._cache if slot.endswith(" " + alias)]:
        del secret._cache[slot]


def identity_row(alias: str) -> str:
    return IdempotencyDatabase.objects.using(alias).get().identity


def test_a_copy_carries_the_identity_row_but_is_another_database(copy: str) -> None:
    assert identity_row(COPY) == identity_row("default")
    assert secret.database_identity(COPY) != secret.database_identity("default")


@pytest.mark.requires_redis
def test_a_copys_customer_never_gets_the_origins_cached_answer(copy: str, redis_url: str) -> None:
    key = new_key()
    names = [cache.cache_key(alias, "1", key) for alias in ("default", COPY)]
    try:
        with override_settings(IDEMPOTENCY_TTL=300):
            assert send("default", key).status_code == 201
            assert send("default", key)["Idempotent-Replayed"] == "true"  # now cached
            bolts = send(COPY, key)
        assert bolts.status_code == 201
        assert "Idempotent-Replayed" not in bolts
        assert json.loads(bolts.content)["database"] == COPY  # bolt's own view ran
        assert Charge.objects.using(COPY).filter(reference=f"{COPY}:{key}").count() == 1
    finally:
        cache._store("replay").backend.delete_many(names)


def test_a_row_copied_between_copies_does_not_open(copy: str) -> None:
    """The identity row is the same in both (copied with the database): the server's part
    is not, so acme's row does not open in bolt's database."""
    key = new_key()
    assert send("default", key).status_code == 201
    row = IdempotencyEntry.objects.get(key=key)
    row.pk = None
    row.save(using=COPY)
    answer = send(COPY, key)
    assert answer.status_code == 500
    assert str(problem(answer)["type"]).endswith("#answer-unreadable")
    assert not Charge.objects.using(COPY).filter(reference=f"{COPY}:{key}").exists()
    assert send("default", key)["Idempotent-Replayed"] == "true"  # acme's own still opens


def test_a_row_copied_with_the_identity_row_does_not_open(copy: str) -> None:
    """Two databases of their own (bolt draws its identity row anew); whoever writes both
    copies acme's answer and acme's identity row (not secret) into bolt's."""
    IdempotencyDatabase.objects.using(COPY).update(identity=os.urandom(16).hex())
    forget(COPY)
    key = new_key()
    assert send("default", key).status_code == 201
    row = IdempotencyEntry.objects.get(key=key)
    row.pk = None
    row.save(using=COPY)
    IdempotencyDatabase.objects.using(COPY).update(identity=identity_row("default"))
    forget(COPY)
    answer = send(COPY, key)
    assert answer.status_code == 500
    assert str(problem(answer)["type"]).endswith("#answer-unreadable")


def test_a_copy_replays_its_own_answers(copy: str) -> None:
    key = new_key()
    first = send(COPY, key)
    assert first.status_code == 201
    assert send(COPY, key).content == first.content
