"""``python -m bench.pipeline``: psycopg's client CPU for a transaction's first statement.

The store sends a claim with its ``BEGIN`` (and a record with its ``COMMIT``) in
one round trip, through a psycopg pipeline. This times, in process CPU (user and
system: the socket's system calls count), the ways of sending ``BEGIN`` and one
statement and then ``COMMIT`` on one connection in autocommit, interleaved:
three plain ``execute`` calls (three round trips), a pipeline holding ``BEGIN``
and the statement (two round trips: what ``carry`` does), and one simple query
``BEGIN; SELECT 1`` (two round trips; client-side binding, as Django's default
sends SQL, so no prepared statement). The statement is ``SELECT 1``: the
server's work is nil, the difference is the client's.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python -m bench.pipeline
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

import psycopg

from bench import scratch
from tests.system.harness import with_database


def ways(conn: psycopg.Connection[tuple[object, ...]]) -> dict[str, Callable[[], None]]:
    cursor = conn.cursor()

    def plain() -> None:
        for statement in ("BEGIN", "SELECT 1", "COMMIT"):
            cursor.execute(statement)

    def pipelined() -> None:
        with conn.pipeline():
            cursor.execute("BEGIN")
            cursor.execute("SELECT %s", (1,))
        cursor.execute("COMMIT")

    def one_query() -> None:
        cursor.execute("BEGIN; SELECT 1")
        cursor.execute("COMMIT")

    return {
        "BEGIN, SELECT, COMMIT: three executes": plain,
        "pipeline(BEGIN, SELECT), COMMIT": pipelined,
        "'BEGIN; SELECT 1' as one query, COMMIT": one_query,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pipeline", description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--requests", type=int, default=300, help="samples per way per round")
    args = parser.parse_args(argv)
    url = with_database(scratch.server_url(), "postgres")
    with psycopg.connect(url, autocommit=True) as conn:
        chosen = ways(conn)
        medians: dict[str, list[float]] = {name: [] for name in chosen}
        for _ in range(args.rounds):
            spent: dict[str, list[float]] = {name: [] for name in medians}
            for _ in range(args.requests):
                for name, way in chosen.items():
                    started = time.process_time()
                    way()
                    spent[name].append(time.process_time() - started)
            for name, samples in spent.items():
                medians[name].append(statistics.median(samples))
    print(f"{'way':42} CPU µs, median (range of {args.rounds} round medians)")
    for name, values in medians.items():
        low, high = min(values) * 1e6, max(values) * 1e6
        print(f"{name:42} {statistics.median(values) * 1e6:6.1f} ({low:.1f}..{high:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
