"""The write guard (``UncoveredWrite``) sees a write to another database whatever comes
before its first keyword: a tracing tag (sqlcommenter's ``/* ... */``), a ``--`` line,
parentheses; and whatever cursor sends it: Django's, or the
driver's own (``connection.connection.cursor()``, ``driver_cursors``), on a connection
open before the view or opened by it.

What it cannot see, and docs/operations.rst says so: a write from a thread the view
starts without its context (test_uncovered_threads.py covers those that carry it).
Runs against SQLite, PostgreSQL and MariaDB (``make test-multidb``).
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from django.db import DatabaseError, connections
from django.http import HttpRequest, JsonResponse
from django.test import Client
from django.urls import path

from idempotency_django import databases, idempotent
from tests.helpers import new_key
from tests.testapp.models import Charge

pytestmark = [
    pytest.mark.django_db(transaction=True, databases=["default", "shard1"]),
    pytest.mark.urls(__name__),
]


def insert_sql(conn: Any, placeholder: str) -> str:
    """A charge's INSERT on ``conn``, with the driver's own ``placeholder``."""
    table = conn.ops.quote_name(Charge._meta.db_table)
    columns = ", ".join(conn.ops.quote_name(c) for c in ("reference", "amount", "created_at"))
    return (
        f"INSERT INTO {table} ({columns}) VALUES ({placeholder}, {placeholder}, CURRENT_TIMESTAMP)"
    )


@idempotent(database="default")
def tagged_write_on_the_other_database(request: HttpRequest) -> JsonResponse:
    conn = connections["shard1"]
    sql = f"/*controller='charge',framework='django'*/ {insert_sql(conn, '%s')}"
    with conn.cursor() as cursor:
        cursor.execute(sql, [request.headers["X-Ref"], 1])
    return JsonResponse({}, status=201)


@idempotent(database="default")
def driver_write_on_the_other_database(request: HttpRequest) -> JsonResponse:
    conn = connections["shard1"]
    conn.ensure_connection()
    sql = insert_sql(conn, "?" if conn.vendor == "sqlite" else "%s")  # the driver's placeholders
    cursor = conn.connection.cursor()  # the driver's own: no Django hook sees it
    if request.headers.get("X-Composed"):
        from psycopg import sql as composable  # psycopg's way to build dynamic SQL

        sql = composable.SQL(sql.replace("%s", "{}")).format(  # type: ignore[assignment]
            composable.Placeholder(), composable.Placeholder()
        )
    try:
        cursor.execute(sql, [request.headers["X-Ref"], 1])
    finally:
        cursor.close()
    return JsonResponse({}, status=201)


@idempotent(database="default")
def declared_then_undeclared(request: HttpRequest) -> JsonResponse:
    """The same statement text twice through sqlite3's own cursor: declared, then not."""
    conn = connections["shard1"]
    conn.ensure_connection()
    sql = insert_sql(conn, "?")
    reference = request.headers["X-Ref"]
    with databases.uncovered("shard1"):
        conn.connection.execute(sql, [f"{reference}-declared", 1])
    conn.connection.execute(sql, [f"{reference}-undeclared", 1])
    return JsonResponse({}, status=201)


urlpatterns = [
    path("tagged/", tagged_write_on_the_other_database),
    path("driver/", driver_write_on_the_other_database),
    path("declared-then-undeclared/", declared_then_undeclared),
]


def test_a_write_to_another_database_after_a_leading_comment_is_refused() -> None:
    key = new_key()
    with pytest.raises(databases.UncoveredWrite, match="'shard1'"):
        _post_write("/tagged/", key)
    assert not Charge.objects.using("shard1").filter(reference=key).exists()


@pytest.mark.parametrize(
    "sql",
    [
        "/* tag */ INSERT INTO t VALUES (1)",
        "-- a note\nUPDATE t SET a = 1",
        "  /* one */ /* two */\n DELETE FROM t",
        "(  INSERT INTO t VALUES (1))",
        "# MySQL's comment\nREPLACE INTO t VALUES (1)",
        "/* tag */ WITH x AS (SELECT 1) INSERT INTO t SELECT * FROM x",
    ],
)
def test_a_leading_comment_hides_no_write(sql: str) -> None:
    assert databases.is_write(sql)


@pytest.mark.parametrize(
    "sql", ["/* INSERT */ SELECT 1", "SELECT 1 -- DELETE", "/* never closed INSERT"]
)
def test_a_write_keyword_inside_a_comment_is_no_write(sql: str) -> None:
    assert not databases.is_write(sql)


def guarded(alias: str) -> bool:
    """Whether ``alias``'s driver connection checks what its own cursors send."""
    conn = connections[alias]
    if conn.vendor == "sqlite":
        # The sqlite3 connection whose authorizer the guard set: a newer one is not guarded.
        return getattr(conn, "_idempotency_authorized", None) is conn.connection
    attribute = "cursorclass" if conn.vendor == "mysql" else "cursor_factory"
    return hasattr(getattr(conn.connection, attribute), "_idempotency_unguarded")


@pytest.fixture(params=["open before the view", "opened by the view"])
def shard1_state(request: pytest.FixtureRequest) -> str:
    if request.param == "opened by the view":
        connections["shard1"].close()
    else:
        connections["shard1"].ensure_connection()
    return str(request.param)


def _post_write(path: str, key: str, client: Client | None = None, **headers: str) -> object:
    """A keyed POST to one of the writing views above; ``X-Ref`` names its charge."""
    return (client or Client()).post(
        path,
        "{}",
        content_type="application/json",
        headers={"Idempotency-Key": key, "X-Ref": key, **headers},
    )


def _post_driver_write(key: str, client: Client | None = None, composed: bool = False) -> object:
    return _post_write("/driver/", key, client, **({"X-Composed": "1"} if composed else {}))


def test_a_composed_statement_through_the_drivers_cursor_is_refused(shard1_state: str) -> None:
    """psycopg.sql's Composed objects are checked as the text they send."""
    if connections["shard1"].vendor != "postgresql":
        pytest.skip("psycopg.sql builds PostgreSQL statements")
    key = new_key()
    with pytest.raises(databases.UncoveredWrite, match="'shard1'"):
        _post_driver_write(key, composed=True)
    assert not Charge.objects.using("shard1").filter(reference=key).exists()


@pytest.mark.django_db(transaction=True, databases=["default", "shard1", "replica"])
def test_a_nested_watch_leaves_the_outer_views_guard_in_place() -> None:
    """An inner protected call watching other aliases ends: the outer's guard stays."""
    for alias in ("default", "shard1", "replica"):
        connections[alias].ensure_connection()
    with databases.watching("default"):  # guards shard1 and replica
        with databases.watching("shard1"):  # would guard default and replica
            pass
        assert guarded("replica")  # still the outer's
    assert not guarded("replica")


def test_a_write_through_the_drivers_own_cursor_is_refused(shard1_state: str) -> None:
    key = new_key()
    with pytest.raises(databases.UncoveredWrite, match="'shard1'"):
        _post_driver_write(key)
    assert not Charge.objects.using("shard1").filter(reference=key).exists()
    # Left as found: the driver's cursors are plain again once the view is over.
    assert not guarded("shard1")


def test_in_production_a_drivers_write_runs_and_is_reported(
    shard1_state: str, reported_uncovered: list[str]
) -> None:
    key = new_key()
    response = _post_driver_write(key, Client(raise_request_exception=False))
    assert response.status_code == 201  # type: ignore[attr-defined]
    assert reported_uncovered == ["shard1"]
    assert Charge.objects.using("shard1").filter(reference=key).exists()


def test_djangos_own_cursor_is_checked_once_not_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Django's cursor on shard1 is made from the guarded class too: its statement is
    checked by Django's hook, and the driver's check lets it pass."""
    monkeypatch.setattr(databases, "refusing", lambda: False)
    checked: list[object] = []
    real = databases._Watch.check

    def counting(self: databases._Watch, sql: object) -> None:
        checked.append(sql)
        real(self, sql)

    monkeypatch.setattr(databases._Watch, "check", counting)
    key = new_key()
    response = Client().post(
        "/tagged/",
        "{}",
        content_type="application/json",
        headers={"Idempotency-Key": key, "X-Ref": key},
    )
    assert response.status_code == 201
    assert len([sql for sql in checked if "INSERT" in str(sql)]) == 1


def test_a_statement_sqlite_cached_while_declared_is_refused_once_undeclared() -> None:
    """SQLite asks its authorizer only while preparing: a write allowed inside uncovered()
    stays in sqlite3's statement cache, so leaving uncovered() expires it."""
    if connections["shard1"].vendor != "sqlite":
        pytest.skip("SQLite's authorizer and statement cache")
    key = new_key()
    with pytest.raises(databases.UncoveredWrite, match="'shard1'"):
        _post_write("/declared-then-undeclared/", key)
    assert not Charge.objects.using("shard1").filter(reference=f"{key}-undeclared").exists()


def _driver_insert(alias: str, reference: str, many: bool = False) -> None:
    """A charge inserted through ``alias``'s driver cursor (``executemany`` if ``many``)."""
    conn = connections[alias]
    conn.ensure_connection()
    sql = insert_sql(conn, "?" if conn.vendor == "sqlite" else "%s")
    cursor = conn.connection.cursor()
    try:
        if many:
            cursor.executemany(sql, [[reference, 1], [f"{reference}-2", 1]])
        else:
            cursor.execute(sql, [reference, 1])
    finally:
        cursor.close()
    if not conn.get_autocommit():
        conn.connection.commit()


def test_a_write_through_the_drivers_executemany_is_refused(shard1_state: str) -> None:
    key = new_key()
    with pytest.raises(databases.UncoveredWrite, match="'shard1'"), databases.watching("default"):
        _driver_insert("shard1", key, many=True)
    assert not Charge.objects.using("shard1").filter(reference__startswith=key).exists()
    assert not guarded("shard1")
    with databases.watching("default"), databases.uncovered("shard1"):
        _driver_insert("shard1", key, many=True)  # declared: it runs
    assert Charge.objects.using("shard1").filter(reference__startswith=key).count() == 2


def test_a_connection_reopened_inside_the_view_is_guarded_then_left_plain() -> None:
    connections["shard1"].ensure_connection()
    key = new_key()
    with pytest.raises(databases.UncoveredWrite, match="'shard1'"), databases.watching("default"):
        assert guarded("shard1")
        connections["shard1"].close()  # as a view calling close_old_connections() might
        connections["shard1"].ensure_connection()
        assert guarded("shard1")  # the new driver connection: guarded from the start
        _driver_insert("shard1", key)
    assert not Charge.objects.using("shard1").filter(reference=key).exists()
    assert not guarded("shard1")
    _driver_insert("shard1", key)  # outside a protected view: the driver writes freely
    assert Charge.objects.using("shard1").filter(reference=key).exists()


def test_a_connection_closed_inside_the_view_is_left_closed_and_plain() -> None:
    connections["shard1"].ensure_connection()
    with databases.watching("default"):
        connections["shard1"].close()
    assert connections["shard1"].connection is None  # the view's end reopened nothing
    connections["shard1"].ensure_connection()
    assert not guarded("shard1")


def test_a_driver_connection_closed_by_hand_inside_the_view_ends_it_cleanly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    conn = connections["shard1"]
    conn.ensure_connection()
    try:
        with caplog.at_level("DEBUG", logger="idempotency_django"), databases.watching("default"):
            conn.connection.close()  # behind Django's back
        if conn.vendor == "sqlite":  # sqlite3 refuses the authorizer on a closed database
            assert "could not put 'shard1''s driver cursors back" in caplog.text
    finally:
        with contextlib.suppress(DatabaseError):  # MySQLdb: closing a closed one is 2006
            conn.close()  # Django forgets the connection either way
    conn.ensure_connection()
    assert not guarded("shard1")
