"""The floor: the database work no idempotency layer can avoid, with psycopg alone.

Around the business write in its own transaction (``BEGIN; INSERT; COMMIT``,
timed whole as ``*_reference``), each floor times only what the least a
protocol must add to it:

- ``"lock"``: an INSERT (the claim) and an UPDATE (the answer) inside the
  business transaction: two statements, no extra commit.
- ``"lease"``: the claim INSERT committed on its own first (its own round trip
  and commit), plus the UPDATE inside the business transaction.

Timing the added statements alone (rather than subtracting two whole
transactions, each dominated by its COMMIT) keeps the figure out of the
commit's noise. The tables mirror the real ones' shape (a unique (tenant, key)
index; a business table with an index on its reference).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import psycopg

from bench.measure import Sample, timed

_TABLES = (
    """CREATE TABLE IF NOT EXISTS bench_floor (
        id bigserial PRIMARY KEY,
        tenant varchar(255) NOT NULL,
        key varchar(255) NOT NULL,
        answer integer,
        UNIQUE (tenant, key)
    )""",
    """CREATE TABLE IF NOT EXISTS bench_floor_charge (
        id bigserial PRIMARY KEY,
        reference varchar(255) NOT NULL,
        amount integer NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS bench_floor_charge_ref ON bench_floor_charge (reference)",
)
_CLAIM = "INSERT INTO bench_floor (tenant, key) VALUES (%s, %s) ON CONFLICT DO NOTHING"
_RECORD = "UPDATE bench_floor SET answer = 201 WHERE tenant = %s AND key = %s"
_BUSINESS = "INSERT INTO bench_floor_charge (reference, amount) VALUES (%s, 100)"

Cursor = psycopg.Cursor[tuple[object, ...]] | psycopg.ClientCursor[tuple[object, ...]]


@contextmanager
def floor_samples(url: str) -> Iterator[dict[str, Sample]]:
    """Samplers of the reference and the two floors, with two ways of binding.

    ``floor_*``: psycopg's defaults (server-side binding, a statement prepared
    after 5 runs): the cheapest the database work gets. ``floor_django_*``: SQL
    bound client-side and never prepared, as Django sends it by default (for
    connection poolers), so every statement is parsed and planned afresh.
    """
    with (
        psycopg.connect(url, autocommit=True) as prepared,
        psycopg.connect(url, autocommit=True, prepare_threshold=None) as plain,
    ):
        for statement in _TABLES:
            prepared.execute(statement.encode())
        yield {
            **_samplers("floor", prepared, prepared.cursor),
            **_samplers("floor_django", plain, lambda: psycopg.ClientCursor(plain)),
        }


def _samplers(
    prefix: str, conn: psycopg.Connection[tuple[object, ...]], cursor: Callable[[], Cursor]
) -> dict[str, Sample]:
    return {
        f"{prefix}_reference": lambda: _reference(conn, cursor()),
        f"{prefix}_lock": lambda: _lock(conn, cursor()),
        f"{prefix}_lease": lambda: _lease(conn, cursor()),
        f"{prefix}_insert": lambda: _lock(conn, cursor(), only=_CLAIM),
        f"{prefix}_update": lambda: _lock(conn, cursor(), only=_RECORD),
    }


def _reference(conn: psycopg.Connection[tuple[object, ...]], cursor: Cursor) -> float:
    key = str(uuid.uuid4())

    def work() -> None:
        with conn.transaction():
            cursor.execute(_BUSINESS, (key,))

    return timed(work)


def _lock(
    conn: psycopg.Connection[tuple[object, ...]], cursor: Cursor, only: str | None = None
) -> float:
    params = ("bench", str(uuid.uuid4()))
    spent = 0.0
    with conn.transaction():
        cursor.execute(_BUSINESS, params[1:])
        for statement in (_CLAIM, _RECORD):
            started = time.perf_counter()
            cursor.execute(statement, params)
            spent += time.perf_counter() - started if only in (None, statement) else 0.0
    return spent


def _lease(conn: psycopg.Connection[tuple[object, ...]], cursor: Cursor) -> float:
    params = ("bench", str(uuid.uuid4()))
    claimed = timed(lambda: cursor.execute(_CLAIM, params))
    with conn.transaction():
        cursor.execute(_BUSINESS, params[1:])
        started = time.perf_counter()
        cursor.execute(_RECORD, params)
        return claimed + time.perf_counter() - started
