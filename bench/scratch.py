"""The benchmark's scratch databases: their names, and the rows bulk-loaded into them.

``DATABASE_URL`` only names the server: the database it names is never touched.
Creating and dropping them is the system tier's ``ScratchDatabase``
(``tests.system.harness``); the benchmark migrates them with its own settings.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

import psycopg

from tests.system.harness import ScratchDatabase, with_database

# The process id in the name: two runs at once (two checkouts, two agents) never
# drop each other's database; every name starts with idem_bench_.
MAIN = os.environ.get("BENCH_DATABASE") or f"idem_bench_{os.getpid()}"
SCALE = f"{MAIN}_scale"
PURGE = f"{MAIN}_purge"
TABLE = "idempotency_django_idempotencyentry"


class PostgresMissing(Exception):
    """The benchmark needs PostgreSQL and ``DATABASE_URL`` doesn't lead to one."""


def server_url() -> str:
    """``DATABASE_URL`` if it points at a reachable PostgreSQL; raises ``PostgresMissing``."""
    url = os.environ.get("DATABASE_URL", "")
    if urlsplit(url).scheme not in ("postgres", "postgresql"):
        raise PostgresMissing("DATABASE_URL is not set to a postgres:// URL")
    try:
        with psycopg.connect(with_database(url, "postgres"), connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        reason = (str(exc).splitlines() or [type(exc).__name__])[0]
        where = f"{urlsplit(url).hostname}:{urlsplit(url).port or 5432}"  # never the password
        raise PostgresMissing(f"{where} is unreachable: {reason}") from exc
    return url


def server_version(url: str) -> str:
    with psycopg.connect(with_database(url, "postgres")) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    return str(row[0]).split()[0] if row else "?"


@contextmanager
def databases(url: str, names: list[str]) -> Iterator[None]:
    """Fresh, empty ``names`` for the duration of the block; dropped afterwards."""
    scratch = [ScratchDatabase(url, name) for name in names]
    for database in scratch:
        database.create(migrate=False)
    try:
        yield
    finally:
        for database in scratch:
            database.drop()


# Completed entries of realistic size, spread over 1,000 tenants and the last day,
# with UUID-shaped keys in random order (as clients send them).
_LOAD = f"""
INSERT INTO {TABLE} (tenant, key, fingerprint, status, owner, response_status,
                     response_headers, response_body, locked_until, created_at, expires_at)
SELECT (i % 1000)::text, md5(i::text)::uuid::text, md5(i::text) || md5((-i)::text),
       'completed', md5((i + 1)::text)::uuid, 201,
       '[["Content-Type", "application/json"], ["Location", "/charges/1"]]'::jsonb,
       convert_to('{{{{"id": ' || i || ', "amount": 100, "currency": "eur"}}}}', 'UTF8'),
       now() - (i % 86400) * interval '1 second', now() - (i % 86400) * interval '1 second',
       now() + interval '1 day' - (i % 86400) * interval '1 second'
FROM generate_series(1, {{rows}}) AS i
"""

# Every index but the primary key, with the constraint owning it if any.
_INDEXES = f"""
SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid),
       c.conname, pg_get_constraintdef(c.oid)
FROM pg_index i LEFT JOIN pg_constraint c ON c.conindid = i.indexrelid AND c.contype = 'u'
WHERE i.indrelid = '{TABLE}'::regclass AND NOT i.indisprimary
"""


def load_entries(url: str, rows: int) -> float:
    """Bulk-load ``rows`` entries; returns the seconds it took.

    The indexes are dropped and rebuilt around the INSERT (a sorted build is far
    faster than 10 million random insertions), then VACUUM ANALYZE leaves the
    table as autovacuum would: hint bits set, statistics current.
    """
    started = time.monotonic()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = off")
        conn.execute("SET maintenance_work_mem = '512MB'")
        indexes = conn.execute(_INDEXES.encode()).fetchall()
        for index, _definition, constraint, _constraint_def in indexes:
            drop = f"ALTER TABLE {TABLE} DROP CONSTRAINT {constraint}" if constraint else None
            conn.execute((drop or f"DROP INDEX {index}").encode())
        conn.execute(_LOAD.format(rows=int(rows)).encode())
        for _index, definition, constraint, constraint_def in indexes:
            create = f"ALTER TABLE {TABLE} ADD CONSTRAINT {constraint} {constraint_def}"
            conn.execute((create if constraint else definition).encode())
        conn.execute(f"VACUUM ANALYZE {TABLE}".encode())
    return time.monotonic() - started


def truncate_entries(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"TRUNCATE {TABLE}".encode())
        conn.execute(f"VACUUM ANALYZE {TABLE}".encode())


def sizes(url: str) -> dict[str, float]:
    """Megabytes of the entries table (with its indexes) and of its unique (tenant, key) index."""
    with psycopg.connect(url) as conn:
        row = conn.execute(_SIZES.encode()).fetchone()
    assert row is not None
    return {"table_mb": row[0] / 2**20, "unique_index_mb": row[1] / 2**20}


_SIZES = f"""
SELECT pg_total_relation_size('{TABLE}'),
       (SELECT pg_relation_size(c.conindid) FROM pg_constraint c
        WHERE c.conrelid = '{TABLE}'::regclass AND c.contype = 'u' LIMIT 1)
"""
