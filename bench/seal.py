"""``python -m bench.seal``: what sealing stored answers at rest costs, beside the floor.

A first execution seals its answer once (:func:`idempotency_django._storage.seal.seal`);
a replay opens it once (:func:`~idempotency_django._storage.seal.opened`). Both are timed
alone, in a loop, at a 2 KB JSON body with the usual headers, interleaved with
the floor: psycopg alone sending the claim's INSERT and the record's UPDATE on a
UNIQUE(tenant, key) table (what any idempotency layer must send; see
``bench/added.py``). The target (issue #32): at most +0.02 ms per first
execution and per replay.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python -m bench.seal
"""

from __future__ import annotations

import argparse
import json
import os
import uuid

import django

from bench.measure import Sample, sweep, timed

TARGET_MS = 0.02
BATCH = 20
_TABLE = """CREATE TABLE IF NOT EXISTS bench_seal_floor (
    id bigserial PRIMARY KEY, tenant varchar(255) NOT NULL, key varchar(255) NOT NULL,
    answer integer, UNIQUE (tenant, key))"""
_CLAIM = "INSERT INTO bench_seal_floor (tenant, key) VALUES (%s, %s) ON CONFLICT DO NOTHING"
_RECORD = "UPDATE bench_seal_floor SET answer = 201 WHERE tenant = %s AND key = %s"


def body(size: int = 2048) -> bytes:
    """A JSON body of about ``size`` bytes."""
    items = [{"id": i, "sku": f"SKU-{i:06d}", "qty": 1} for i in range(size // 36)]
    return json.dumps({"items": items}).encode()[:size]


def seal_cases() -> dict[str, Sample]:
    from idempotency_django._protocol.responses import StoredResponse
    from idempotency_django._storage import seal

    answer = StoredResponse(
        201,
        [("Content-Type", "application/json"), ("Location", "/orders/1"), ("Vary", "Cookie")],
        body(),
        "",
    )
    sealed = seal.seal("default", "42", "order-1", answer)

    def sealing() -> None:
        for _ in range(BATCH):
            seal.seal("default", "42", "k", answer)

    def opening() -> None:
        for _ in range(BATCH):
            seal.opened("default", "42", "order-1", sealed)

    # Timed in batches: one call is near the clock's own resolution.
    return {
        "seal (first execution)": lambda: timed(sealing) / BATCH,
        "open (replay)": lambda: timed(opening) / BATCH,
    }


def floor_case(url: str) -> Sample:
    import psycopg

    conn = psycopg.connect(url, autocommit=True)
    conn.execute(_TABLE)
    cursor = psycopg.ClientCursor(conn)

    def sample() -> float:
        params = ("bench", str(uuid.uuid4()))

        def work() -> None:
            cursor.execute(_CLAIM, params)
            cursor.execute(_RECORD, params)

        return timed(work)

    return sample


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--per-round", type=int, default=200)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    django.setup()
    from django.conf import settings

    from idempotency_django._storage import seal

    # An explicit key: the cost measured is the cipher's, not the secret's first read.
    settings.IDEMPOTENCY_ENCRYPTION_KEYS = [seal.new_key()]
    # The identity a server holds after its first read: no database is set up here.
    from idempotency_django._storage import secret

    secret._cache[secret._IDENTITY + "default"] = os.urandom(16)
    secret._cache[secret._SERVER + "default"] = b'["sqlite", ""]'
    cases = seal_cases()
    url = os.environ.get("DATABASE_URL", "")
    if url.startswith("postgres"):
        cases["floor (INSERT + UPDATE)"] = floor_case(url)
    results = sweep(cases, args.rounds, args.per_round)
    print(f"sealing stored answers, 2 KB body ({args.rounds} rounds x {args.per_round}):")
    for name, series in results.items():
        low, high = series.spread
        print(
            f"  {name:<26} {series.median * 1000:8.4f} ms  "
            f"(rounds {low * 1000:.4f}-{high * 1000:.4f})"
        )
    worst = max(results[n].median for n in ("seal (first execution)", "open (replay)"))
    verdict = "within" if worst * 1000 <= TARGET_MS else "OVER"
    print(f"  target: +{TARGET_MS} ms per first execution and per replay: {verdict}")


if __name__ == "__main__":
    main()
