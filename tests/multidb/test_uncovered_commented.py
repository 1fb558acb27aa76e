"""The write guard (``UncoveredWrite``) sees a write to another database whatever comes
before its first keyword: a tracing tag (sqlcommenter's ``/* ... */``), a ``--`` line,
parentheses.

What it cannot see, and docs/how-it-works.rst says so: a write through the driver's
own cursor (``connection.connection.cursor()``), which no Django hook sees, and a
write from a thread the view starts (another thread has its own connections, which the
view's watch is not on).
"""

from __future__ import annotations

import pytest
from django.db import connections
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
TAGGED = "/*controller='charge',framework='django'*/ INSERT INTO {table} ({columns}) VALUES (%s, %s, {now})"


@idempotent(database="default")
def tagged_write_on_the_other_database(request: HttpRequest) -> JsonResponse:
    conn = connections["shard1"]
    table = conn.ops.quote_name(Charge._meta.db_table)
    columns = ", ".join(conn.ops.quote_name(c) for c in ("reference", "amount", "created_at"))
    sql = TAGGED.format(table=table, columns=columns, now="CURRENT_TIMESTAMP")
    with conn.cursor() as cursor:
        cursor.execute(sql, [request.headers["X-Ref"], 1])
    return JsonResponse({}, status=201)


urlpatterns = [path("tagged/", tagged_write_on_the_other_database)]


def test_a_write_to_another_database_after_a_leading_comment_is_refused() -> None:
    key = new_key()
    with pytest.raises(databases.UncoveredWrite, match="'shard1'"):
        Client().post(
            "/tagged/",
            "{}",
            content_type="application/json",
            headers={"Idempotency-Key": key, "X-Ref": key},
        )
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
