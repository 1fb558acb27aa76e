"""Purge 1,000,000 expired entries while another process keeps claiming new keys.

``DATABASE_URL=postgres://… python -m bench.purge`` (``make bench`` runs it through
``python -m bench``). On a scratch database of its own (``idem_bench_<pid>_purge``,
created and dropped here) it bulk-loads expired rows, then runs the real
``idempotency_django.purge.purge`` while a claimer process calls ``store.claim``
for new keys at a steady rate, and compares the claims' latency during the purge
with their latency idle.

The rows expire in ``SLICES`` equal steps and the purge runs once per step (its
``now`` set to the step's end), with an idle gap before each: idle and busy
windows alternate within a second, so whatever else the machine is doing weighs
on both sides of the comparison alike. Each batch size gets ``ROUNDS`` fresh
loads, their samples pooled: a p99 of a few hundred samples is mostly noise.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from functools import partial
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event
from typing import Any
from urllib.parse import urlsplit

from bench import scratch
from tests.system.harness import ScratchDatabase

ALIAS = "bench_purge"
DATABASE = scratch.PURGE
ROWS = 1_000_000
SLICES = 10
ROUNDS = 2
OTHER_BATCH_SIZES = (500,)  # measured besides the command's default
CLAIMS_PER_SECOND = 500
IDLE_GAP = 1.0  # seconds of idle claiming before each slice's purge
SETTLE = 0.1  # seconds after a purge that count neither as idle nor as during
TABLE = "idempotency_django_idempotencyentry"
STEP = timedelta(milliseconds=1)  # row g expires at base + g * STEP (as LOAD_SQL says)
# A stored answer of realistic size; every row long past its expiry.
LOAD_SQL = f"""
INSERT INTO {TABLE} (tenant, key, fingerprint, status, owner, response_status,
                     response_headers, response_body, locked_until, created_at, expires_at)
SELECT (g %% 1000)::text, md5(g::text), md5(g::text) || md5(g::text), 'completed',
       gen_random_uuid(), 201, '[["Content-Type", "application/json"]]'::jsonb,
       convert_to('{{"id": ' || g || ', "amount": 100, "currency": "eur"}}', 'UTF8'),
       %(base)s, %(base)s, %(base)s + g * interval '1 millisecond'
FROM generate_series(1, %(rows)s) AS g
"""
Windows = list[tuple[float, float]]


def main() -> dict[str, float]:
    """Run the benchmark, print its table and return its figures."""
    database = ScratchDatabase(_server_url(), DATABASE)
    _setup_django()
    database.create(migrate=False)
    try:
        figures = _run()
    finally:
        _close()
        database.drop()
    print(_table(figures))
    return figures


def _server_url() -> str:
    url = os.environ.get("DATABASE_URL", "")
    if urlsplit(url).scheme not in ("postgres", "postgresql"):
        print(
            "bench.purge needs PostgreSQL: set DATABASE_URL=postgres://user@host:port/any-db "
            f"(it works on a scratch database of that server, {DATABASE}).",
            file=sys.stderr,
        )
        raise SystemExit(2)
    return url


def _setup_django() -> None:
    """Django plus an alias for the scratch database (settings may already be set up)."""
    import django
    from django.db import connections

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    django.setup()
    if ALIAS not in connections.settings:
        connections.settings[ALIAS] = {**connections.settings["default"], "NAME": DATABASE}


def _close() -> None:
    from django.db import connections

    connections[ALIAS].close()


def _run() -> dict[str, float]:
    from django.core.management import call_command

    call_command("migrate", database=ALIAS, verbosity=0)
    figures: dict[str, float] = {"rows": ROWS, "rounds": ROUNDS, "claims_per_s": CLAIMS_PER_SECOND}
    for batch_size in _batch_sizes():
        figures.update(_measure(batch_size))
    figures["load_average"] = os.getloadavg()[0]
    return figures


def _batch_sizes() -> tuple[int, ...]:
    from idempotency_django.purge import DEFAULT_BATCH_SIZE

    return (DEFAULT_BATCH_SIZE, *OTHER_BATCH_SIZES)


def _measure(batch_size: int) -> dict[str, float]:
    """``ROUNDS`` fresh loads purged at ``batch_size``; the samples pooled."""
    deleted, seconds, idle, busy = 0, 0.0, [], []
    for _ in range(ROUNDS):
        base = datetime.now().astimezone() - timedelta(days=2)
        _load(base)
        samples, (windows, gone) = _with_claimer(partial(_purge_in_slices, base, batch_size))
        deleted += gone
        seconds += sum(end - start for start, end in windows)
        idle += _outside(samples, windows)
        busy += _inside(samples, windows)
    figures = {
        "deleted": deleted / ROUNDS,
        "rows_per_s": deleted / seconds,
        **_percentiles("idle", idle),
        **_percentiles("purge", busy),
    }
    figures["p99_ratio"] = figures["purge_p99_ms"] / figures["idle_p99_ms"]
    return {f"b{batch_size}_{name}": value for name, value in figures.items()}


def _load(base: datetime) -> None:
    from django.db import connections

    with connections[ALIAS].cursor() as cursor:
        cursor.execute(f"TRUNCATE {TABLE}")
        cursor.execute(LOAD_SQL, {"base": base, "rows": ROWS})
        # A table in steady state: hint bits set, statistics current (autovacuum's work).
        cursor.execute(f"VACUUM ANALYZE {TABLE}")


def _purge_in_slices(base: datetime, batch_size: int) -> tuple[Windows, int]:
    """Purge slice after slice, each after an idle gap; the purges' time windows."""
    from idempotency_django.purge import purge

    windows: Windows = []
    deleted = 0
    for index in range(1, SLICES + 1):
        time.sleep(IDLE_GAP)
        now = base + STEP * (ROWS * index // SLICES)
        started = time.monotonic()
        deleted += purge(using=ALIAS, batch_size=batch_size, now=now).expired
        windows.append((started, time.monotonic()))
    time.sleep(IDLE_GAP)
    return windows, deleted


def _inside(samples: Windows, windows: Windows) -> list[float]:
    return [lat for at, lat in samples if any(start <= at <= end for start, end in windows)]


def _outside(samples: Windows, windows: Windows) -> list[float]:
    return [
        lat for at, lat in samples if not any(start <= at <= end + SETTLE for start, end in windows)
    ]


def _with_claimer(work: Callable[[], Any]) -> tuple[Windows, Any]:
    """Run ``work`` while a claimer process claims; its ``(start, latency)`` samples."""
    context = multiprocessing.get_context("spawn")
    ready, stop = context.Event(), context.Event()
    receiver, sender = context.Pipe(duplex=False)
    claimer = context.Process(target=_claimer, args=(_settings_dict(), ready, stop, sender))
    claimer.start()
    try:
        if not ready.wait(60):
            raise RuntimeError("the claimer process did not start")
        outcome = work()
        stop.set()
        samples: Windows = receiver.recv()
    finally:
        stop.set()
        claimer.join(30)
        if claimer.is_alive():
            claimer.kill()
    return samples, outcome


def _settings_dict() -> dict[str, Any]:
    from django.db import connections

    return dict(connections.settings[ALIAS])


def _claimer(settings_dict: dict[str, Any], ready: Event, stop: Event, sender: Connection) -> None:
    """The claimer process: ``store.claim`` of new keys at a steady rate until ``stop``."""
    import django
    from django.db import connections

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    django.setup()
    connections.settings[ALIAS] = settings_dict
    for _ in range(200):  # warm the connection and the code paths
        _claim_one()
    ready.set()
    samples: Windows = []
    interval, next_at = 1 / CLAIMS_PER_SECOND, time.monotonic()
    while not stop.is_set():
        started = time.monotonic()
        _claim_one()
        samples.append((started, time.monotonic() - started))
        next_at += interval
        time.sleep(max(0.0, next_at - time.monotonic()))
    sender.send(samples)
    connections[ALIAS].close()


def _claim_one() -> None:
    from bench.claims import claim_new

    claim_new(ALIAS, "bench", uuid.uuid4().hex)


def _percentiles(name: str, latencies: list[float]) -> dict[str, float]:
    cuts = statistics.quantiles(latencies, n=100, method="inclusive")
    return {
        f"{name}_claims": len(latencies),
        f"{name}_p50_ms": statistics.median(latencies) * 1000,
        f"{name}_p99_ms": cuts[98] * 1000,
    }


def _table(f: dict[str, float]) -> str:
    lines = [
        f"bench.purge: {f['rows']:,.0f} expired rows purged in {SLICES} slices, "
        f"{f['rounds']:.0f} rounds per batch size; claims at {f['claims_per_s']:.0f}/s; "
        f"{os.cpu_count()} CPUs, load average {f['load_average']:.1f}",
        "  batch size       rows/s   claims idle: p50 / p99 ms (n)   "
        "during purge: p50 / p99 ms (n)   p99 during/idle",
    ]
    for size in _batch_sizes():
        b = {
            name.removeprefix(f"b{size}_"): v
            for name, v in f.items()
            if name.startswith(f"b{size}_")
        }
        label = f"{size} (default)" if size == _batch_sizes()[0] else str(size)
        lines.append(
            f"  {label:<14} {b['rows_per_s']:>8,.0f}   "
            f"{b['idle_p50_ms']:5.2f} / {b['idle_p99_ms']:5.2f} ({b['idle_claims']:5.0f})        "
            f"{b['purge_p50_ms']:5.2f} / {b['purge_p99_ms']:5.2f} ({b['purge_claims']:5.0f})        "
            f"{b['p99_ratio']:.2f}x"
        )
    lines.append("  targets: >= 100,000 rows/s; claim p99 during the purge <= 2x idle")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
