"""Failures that mean "try again later" are a 409 with ``Retry-After``, never a 500 or a 503.

- A serialization failure (40001, SERIALIZABLE's verdict) at the entry's record or at
  COMMIT rolls the whole execution back: nothing committed, the key is free, the
  client retries. Both claim forms (``IDEMPOTENCY_TEST_CLAIM``).
- A ``wait=`` longer than the server's ``statement_timeout``: the lock wait is
  cancelled (57014); the holder is still at it, the store is not unavailable.

The 40001 is the server's own error, raised by a trigger on the entries' table
for the keys of this test only (a deferred constraint trigger raises it at
COMMIT): SSI's verdict on a real write skew depends on page-level predicate
locks, the trigger makes the same error where and when the test says.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection, connections

from idempotency_django.models import IdempotencyEntry
from tests.helpers import charges, new_key, problem
from tests.lock_helpers import dsn, lock_id, send

pytestmark = [pytest.mark.requires_postgres, pytest.mark.django_db(transaction=True)]
TABLE = IdempotencyEntry._meta.db_table
_FUNCTION = """
CREATE OR REPLACE FUNCTION idem_test_serialization_failure() RETURNS trigger
LANGUAGE plpgsql AS $$ BEGIN
    IF NEW.key LIKE '%-other-%' THEN
        RAISE EXCEPTION 'injected' USING ERRCODE = 'check_violation';
    END IF;
    RAISE EXCEPTION 'injected' USING ERRCODE = 'serialization_failure';
END $$"""
_WHEN = "FOR EACH ROW WHEN (NEW.status <> 'in_progress' AND NEW.key LIKE '{prefix}%')"
_TRIGGERS = {
    # At the record's own statement (the read-only claim's INSERT, the inserting one's UPDATE).
    "record": f"CREATE TRIGGER idem_test_fail_record AFTER INSERT OR UPDATE ON {TABLE} "
    f"{_WHEN.format(prefix='fail-at-record-')} EXECUTE FUNCTION idem_test_serialization_failure()",
    # At COMMIT: a deferred constraint trigger runs then.
    "commit": f"CREATE CONSTRAINT TRIGGER idem_test_fail_commit AFTER INSERT OR UPDATE ON {TABLE} "
    f"DEFERRABLE INITIALLY DEFERRED {_WHEN.format(prefix='fail-at-commit-')} "
    "EXECUTE FUNCTION idem_test_serialization_failure()",
}


@pytest.fixture(params=[True, False], ids=["prepared", "carried-commit"])
def failing_triggers(request: pytest.FixtureRequest, settings: Any) -> Iterator[None]:
    """The triggers, with the record prepared (COMMIT apart) or carrying the COMMIT."""
    settings.IDEMPOTENCY_PREPARED_STATEMENTS = request.param
    with connection.cursor() as cursor:
        cursor.execute(_FUNCTION)
        for sql in _TRIGGERS.values():
            cursor.execute(sql)
    yield
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TRIGGER IF EXISTS idem_test_fail_record ON {TABLE}")
        cursor.execute(f"DROP TRIGGER IF EXISTS idem_test_fail_commit ON {TABLE}")
        cursor.execute("DROP FUNCTION IF EXISTS idem_test_serialization_failure()")


@pytest.mark.parametrize("where", ["record", "commit"])
def test_a_serialization_failure_after_the_view_is_a_409_and_commits_nothing(
    failing_triggers: None, where: str
) -> None:
    key = f"fail-at-{where}-{new_key()}"
    response = send(key, {"amount": 100, "reference": key})
    assert response.status_code == 409, response.content
    assert problem(response)["status"] == 409
    assert response["Retry-After"] == "1"
    assert charges(key) == 0
    assert not IdempotencyEntry.objects.filter(key=key).exists()
    # The key is free: with the failure gone, the retry runs once.
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TRIGGER idem_test_fail_{where} ON {TABLE}")
    assert send(key, {"amount": 100, "reference": key}).status_code == 201
    assert charges(key) == 1


def test_any_other_failure_at_commit_is_a_500_that_commits_nothing(
    failing_triggers: None,
) -> None:
    """Not a serialization failure (a deferred constraint): the view's error, the key free."""
    key = f"fail-at-commit-other-{new_key()}"
    response = send(key, {"amount": 100, "reference": key})
    assert response.status_code == 500
    assert charges(key) == 0
    assert not IdempotencyEntry.objects.filter(key=key).exists()
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TRIGGER idem_test_fail_commit ON {TABLE}")
    assert send(key, {"amount": 100, "reference": key}).status_code == 201
    assert charges(key) == 1


class ShortStatementTimeout(threading.Thread):
    """A worker whose connection cancels any statement after 50 ms (its wait= is 300 ms)."""

    def __init__(self, key: str) -> None:
        super().__init__(daemon=True)
        self.key = key
        self.response: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SET statement_timeout = '50ms'")
            self.response = send(self.key, {"amount": 100, "reference": self.key}, wait=0.3)
        except BaseException as exc:  # reported by result()
            self.error = exc
        finally:
            connections.close_all()

    def result(self) -> Any:
        self.join(60)
        assert not self.is_alive(), "the duplicate is still running"
        assert self.error is None, self.error
        return self.response


@pytest.mark.skipif(
    os.environ.get("IDEMPOTENCY_TEST_POOLER") == "pgbouncer",
    reason="a session's statement_timeout does not follow a client through PgBouncer",
)
def test_a_wait_cut_short_by_statement_timeout_is_a_409(caplog: pytest.LogCaptureFixture) -> None:
    key = new_key()
    with psycopg.connect(dsn(), prepare_threshold=None) as holder:
        holder.execute("SELECT pg_advisory_xact_lock(%s::bigint)", [lock_id(key)])
        duplicate = ShortStatementTimeout(key)
        duplicate.start()
        response = duplicate.result()  # the holder is still at it throughout
        holder.rollback()
    assert response.status_code == 409, response.content
    assert int(response["Retry-After"]) >= 1
    assert charges(key) == 0
    assert not [r for r in caplog.records if r.levelname == "ERROR"]
