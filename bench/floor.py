"""The floor: the database work no idempotency layer can avoid, with psycopg alone.

One ``INSERT … ON CONFLICT DO NOTHING`` and one ``UPDATE`` on a table with a
unique (tenant, key) index, each its own commit (autocommit): a claim and a
recorded answer, at their cheapest.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

from bench.measure import Sample, timed

_TABLE = """
CREATE TABLE IF NOT EXISTS bench_floor (
    id bigserial PRIMARY KEY,
    tenant varchar(255) NOT NULL,
    key varchar(255) NOT NULL,
    answer integer,
    UNIQUE (tenant, key)
)
"""
_INSERT = "INSERT INTO bench_floor (tenant, key) VALUES (%s, %s) ON CONFLICT DO NOTHING"
_UPDATE = "UPDATE bench_floor SET answer = 201 WHERE tenant = %s AND key = %s"


@contextmanager
def floor_samples(url: str) -> Iterator[dict[str, Sample]]:
    """Two samplers of the floor: psycopg's defaults, and SQL sent the way Django sends it.

    psycopg prepares a statement it has run 5 times (server-side binding);
    Django turns that off by default (for connection poolers) and binds
    parameters client-side, so every statement is parsed and planned afresh.
    """
    with (
        psycopg.connect(url, autocommit=True) as prepared,
        psycopg.connect(url, autocommit=True, prepare_threshold=None) as plain,
    ):
        prepared.execute(_TABLE)
        yield {
            "floor": lambda: _floor(prepared.cursor()),
            "floor_django_sql": lambda: _floor(psycopg.ClientCursor(plain)),
        }


def _floor(
    cursor: psycopg.Cursor[tuple[object, ...]] | psycopg.ClientCursor[tuple[object, ...]],
) -> float:
    params = ("bench", str(uuid.uuid4()))

    def work() -> None:
        cursor.execute(_INSERT, params)
        cursor.execute(_UPDATE, params)

    return timed(work)
