"""The pooler tier's own proofs: the connections do go through the pooler it names.

The guarantees themselves are the race, crash and wait tests (test_concurrency,
test_lock_protocol, test_faults) run under these settings.
"""

from __future__ import annotations

import psycopg
import pytest
from django.conf import settings
from django.core.checks import run_checks
from django.db import connection
from django.test import override_settings

from tests.conftest import reachable, service_missing

pytestmark = [pytest.mark.requires_postgres, pytest.mark.django_db]


@pytest.fixture
def pgbouncer() -> str:
    db = settings.DATABASES["default"]
    if not reachable(db["HOST"], int(db["PORT"])):
        service_missing(f"PgBouncer at {db['HOST']}:{db['PORT']} is unreachable")
    return f"postgresql://{db['USER'] or 'postgres'}@{db['HOST']}:{db['PORT']}/pgbouncer"


@pytest.mark.pooler("pgbouncer")
def test_every_connection_goes_through_pgbouncer_in_transaction_mode(pgbouncer: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT inet_server_port(), current_database()")
        server_port, database = cursor.fetchone()
    assert server_port != settings.DATABASES["default"]["PORT"]  # a proxy answered
    with psycopg.connect(pgbouncer, autocommit=True, prepare_threshold=None) as admin:
        config = {row[0]: row[1] for row in admin.execute("SHOW CONFIG").fetchall()}
        pools = admin.execute("SHOW POOLS").fetchall()
        version = admin.execute("SHOW VERSION").fetchone()
    assert config["pool_mode"] == "transaction"
    assert any(row[0] == database for row in pools)
    print(f"\n{version[0] if version else 'PgBouncer'}: pool_mode=transaction, {database}")


@pytest.mark.pooler("pgbouncer")
def test_no_prepared_statements_in_the_pgbouncer_tier(pgbouncer: str) -> None:
    assert settings.DATABASES["default"]["OPTIONS"]["prepare_threshold"] is None
    for _ in range(10):  # psycopg would prepare from the 5th run on, were it on
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_prepared_statements")
            assert cursor.fetchone()[0] == 0


@pytest.mark.pooler("psycopg")
def test_the_native_pool_is_in_use() -> None:
    connection.ensure_connection()
    pool = getattr(connection, "pool", None)  # Django's psycopg backend only
    assert pool is not None
    assert pool.max_size == 24


@pytest.mark.pooler("psycopg")
def test_w060_when_a_wait_outlasts_the_pools_checkout_timeout() -> None:
    with override_settings(IDEMPOTENCY_WAIT=90):
        ids = [m.id for m in run_checks()]
    assert "idempotency_django.W060" in ids
    with override_settings(IDEMPOTENCY_WAIT=5):
        assert "idempotency_django.W060" not in [m.id for m in run_checks()]
