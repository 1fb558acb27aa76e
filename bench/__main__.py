"""``python -m bench`` (``make bench``): every case side by side, one table, the same figures as JSON.

PostgreSQL is required: ``DATABASE_URL`` names the server, and the benchmark
works on scratch databases of its own, created here and dropped at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import os
import platform
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import scratch
from bench.measure import Series, per_round
from bench.report import Report, Row, Target

if TYPE_CHECKING:
    from bench.http_cases import Storms

RESULTS = Path(__file__).resolve().parent / "results" / "latest.json"
FIRST = "first execution, in-process (Django test client, same business write)"
FLOOR = "floor: psycopg alone, INSERT ... ON CONFLICT DO NOTHING + UPDATE, each its own commit"
WHERE = "where the added latency goes: the captured SQL replayed through psycopg"
PREPARED = "the same with server-side binding and prepared statements (not Django's default)"
REPLAY = "replay of a completed key, in-process"
HTTP = "over HTTP: gunicorn, sync workers, loopback client, one connection per request"
STORM = "storm: 64 concurrent requests over HTTP, time until all have an answer"
SCALE = "scale: store.claim on an empty table and on a loaded one, alternately"
COUNTS = "SQL statements per request (Django's query capture; BEGIN/COMMIT apart)"


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    try:
        url = scratch.server_url()
    except scratch.PostgresMissing as missing:
        print(
            f"bench: PostgreSQL is required ({missing}).\n"
            "Run it as: DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python -m bench\n"
            f"(it creates and drops scratch databases {scratch.MAIN} and {scratch.SCALE}).",
            file=sys.stderr,
        )
        return 2
    report = Report(_meta(url, args))
    names = [scratch.MAIN] + ([scratch.SCALE] if args.scale_rows else [])
    with scratch.databases(url, names):
        _setup_django(["default"] + (["scale"] if args.scale_rows else []))
        try:
            _run(url, args, report)
        finally:
            _close_connections()
    if not args.skip_purge:
        _purge(report)
    report.meta["load_after"] = _load()
    print(report.render())
    report.write(args.output)
    print(f"\nfigures written to {args.output}")
    return 0


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--rounds", type=int, default=5, help="rounds per sweep (default 5)")
    parser.add_argument(
        "--requests", type=int, default=300, help="in-process samples per round (300)"
    )
    parser.add_argument(
        "--http-requests", type=int, default=100, help="HTTP samples per round (100)"
    )
    parser.add_argument("--workers", type=int, default=4, help="gunicorn workers (default 4)")
    parser.add_argument(
        "--scale-rows",
        type=int,
        default=10_000_000,
        help="entries loaded for the scale case (default 10,000,000, about 1.5 min); 0 skips it",
    )
    parser.add_argument("--skip-http", action="store_true", help="no gunicorn cases")
    parser.add_argument("--skip-purge", action="store_true", help="don't run bench/purge.py")
    parser.add_argument("--output", type=Path, default=RESULTS, help=f"JSON file ({RESULTS})")
    return parser.parse_args(argv)


def _meta(url: str, args: argparse.Namespace) -> dict[str, Any]:
    import django
    import psycopg

    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join(["python -m bench", *sys.argv[1:]]),
        "postgresql": scratch.server_version(url),
        "python": platform.python_version(),
        "django": django.get_version(),
        "psycopg": psycopg.__version__,
        "cpus": os.cpu_count(),
        "load_before": _load(),
        "rounds": args.rounds,
        "requests_per_round": args.requests,
        "http_requests_per_round": args.http_requests,
        "workers": args.workers,
        "scale_rows": args.scale_rows,
    }


def _load() -> str:
    return "/".join(f"{value:.2f}" for value in os.getloadavg())


def _setup_django(aliases: list[str]) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    import django
    from django.core.management import call_command

    django.setup()
    for alias in aliases:
        call_command("migrate", database=alias, verbosity=0)


def _close_connections() -> None:
    from django.core.cache import caches
    from django.db import connections

    from bench.inprocess import redis_available

    connections.close_all()
    if redis_available():
        caches["replay"].delete_pattern("*")  # type: ignore[attr-defined]  # django-redis: our prefix only


def _run(url: str, args: argparse.Namespace, report: Report) -> None:
    from bench import inprocess, outbox

    series, counts = inprocess.run(
        scratch.database_url(url, scratch.MAIN), args.rounds, args.requests
    )
    _in_process(report, series)
    _statement_counts(report, counts)
    outbox.measure(report, args.rounds, args.requests)
    if not args.skip_http:
        _over_http(url, args, report, inprocess.redis_available())
    if args.scale_rows:
        _scale(url, args, report)
    _targets(report)


def _in_process(report: Report, s: dict[str, Series]) -> None:
    added = _minus(s["protected"], s["unprotected"])
    report.timing(FIRST, "unprotected", "unprotected view", s["unprotected"])
    report.timing(FIRST, "protected", "protected view (@idempotent)", s["protected"])
    report.timing(FIRST, "added", "added latency (protected - unprotected)", added)
    report.timing(FLOOR, "floor", "psycopg defaults (prepared after 5 runs)", s["floor"])
    report.timing(
        FLOOR, "floor_django_sql", "the same, bound client-side like Django", s["floor_django_sql"]
    )
    report.ratio(FLOOR, "added_over_floor", "added latency / floor", _over(added, s["floor"]))
    _where_it_goes(report, s, added)
    _prepared(report, s)
    _replays(report, s)


def _prepared(report: Report, s: dict[str, Series]) -> None:
    added = _minus(s["protected_prepared"], s["unprotected_prepared"])
    report.timing(PREPARED, "unprotected_prepared", "unprotected view", s["unprotected_prepared"])
    report.timing(PREPARED, "protected_prepared", "protected view", s["protected_prepared"])
    report.timing(PREPARED, "added_prepared", "added latency (protected - unprotected)", added)
    ratio = _over(added, s["floor"])
    report.ratio(PREPARED, "added_prepared_over_floor", "added latency / floor", ratio)


def _where_it_goes(report: Report, s: dict[str, Series], added: Series) -> None:
    sql_added = _minus(s["sql_protected"], s["sql_unprotected"])
    share = per_round(lambda sql, total: 100 * sql / total, sql_added, added)
    report.timing(WHERE, "sql_protected", "SQL of a protected first execution", s["sql_protected"])
    report.timing(WHERE, "sql_unprotected", "SQL of an unprotected one", s["sql_unprotected"])
    report.timing(WHERE, "sql_added", "SQL added: 3 statements, BEGIN, COMMIT", sql_added)
    row = Row("sql_share", "share of the added latency in SQL", share.median, "%", share.spread)
    report.add(WHERE, row)
    report.timing(WHERE, "claim_durable", "claim, synchronous commit", s["claim_durable"])
    report.timing(WHERE, "claim_relaxed", "claim, relaxed commit (adopted)", s["claim_relaxed"])
    saved = _minus(s["claim_durable"], s["claim_relaxed"])
    report.timing(WHERE, "claim_saved", "saved by the relaxed commit", saved)


def _replays(report: Report, s: dict[str, Series]) -> None:
    report.timing(REPLAY, "replay_pg", "replay from PostgreSQL", s["replay_pg"])
    faster = _over(s["protected"], s["replay_pg"])
    report.ratio(REPLAY, "first_over_replay_pg", "first execution / replay from PostgreSQL", faster)
    if "replay_redis" in s:
        report.timing(REPLAY, "replay_redis", "replay from Redis", s["replay_redis"])
        faster = _over(s["protected"], s["replay_redis"])
        report.ratio(
            REPLAY, "first_over_replay_redis", "first execution / replay from Redis", faster
        )


def _minus(left: Series, right: Series) -> Series:
    return per_round(lambda a, b: a - b, left, right)


def _over(numerator: Series, denominator: Series) -> Series:
    return per_round(lambda n, d: n / d, numerator, denominator)


def _statement_counts(report: Report, counts: dict[str, int]) -> None:
    labels = {
        "first_protected": "first execution, protected (3 + the view's 1)",
        "first_protected_round_trips": "  its round trips, BEGIN and COMMIT included",
        "first_unprotected": "first execution, unprotected (the view's 1)",
        "replay_pg": "replay from PostgreSQL",
        "replay_redis": "replay from Redis",
    }
    for key, label in labels.items():
        if key in counts:
            report.add(COUNTS, Row(f"statements_{key}", label, counts[key], ""))


def _over_http(url: str, args: argparse.Namespace, report: Report, redis: bool) -> None:
    from bench import http_cases
    from bench.floor import floor_samples

    env = http_cases.environment(url, scratch.MAIN)
    floor_url = scratch.database_url(url, scratch.MAIN)
    with http_cases.served(args.workers, env) as server:
        with floor_samples(floor_url) as floors:
            s = http_cases.sequential(server, redis, args.rounds, args.http_requests, floors)
        storms = http_cases.storms(server, redis, args.rounds)
    added = _minus(s["http_protected"], s["http_unprotected"])
    workers = f"{args.workers} workers"
    report.timing(HTTP, "http_unprotected", "unprotected view", s["http_unprotected"], workers)
    report.timing(HTTP, "http_protected", "protected view", s["http_protected"])
    report.timing(HTTP, "http_added", "added latency (protected - unprotected)", added)
    report.timing(HTTP, "http_floor", "floor, sampled in the same rounds", s["floor"])
    report.ratio(HTTP, "http_added_over_floor", "added latency / floor", _over(added, s["floor"]))
    report.timing(HTTP, "http_replay_pg", "replay from PostgreSQL", s["http_replay_pg"])
    report.ratio(
        HTTP,
        "http_first_over_replay_pg",
        "first execution / replay from PostgreSQL",
        _over(s["http_protected"], s["http_replay_pg"]),
    )
    if redis:
        report.timing(HTTP, "http_replay_redis", "replay from Redis", s["http_replay_redis"])
    _storms(report, storms)


def _storms(report: Report, storms: Storms) -> None:
    labels = {
        "storm_first": "one new key (protected)",
        "storm_unprotected": "64 distinct requests, unprotected (reference)",
        "storm_retry_pg": "retries of a completed key, from PostgreSQL",
        "storm_retry_redis": "retries of a completed key, from Redis",
    }
    for kind, label in labels.items():
        if kind in storms.series:
            answers = ", ".join(f"{n}x {status}" for status, n in storms.answers[kind].items())
            report.timing(STORM, kind, label, storms.series[kind], answers)
    executions = sorted(set(storms.executions))
    report.add(
        STORM,
        Row(
            "storm_executions",
            "executions per one-key storm (must be 1)",
            max(storms.executions),
            "",
            None,
            f"every round: {executions}",
        ),
    )
    report.ratio(
        STORM,
        "storm_first_over_unprotected",
        "one-key storm / unprotected storm",
        _over(storms.series["storm_first"], storms.series["storm_unprotected"]),
    )
    report.extra["storm_answers"] = storms.answers


def _scale(url: str, args: argparse.Namespace, report: Report) -> None:
    from bench import scale

    scale_url = scratch.database_url(url, scratch.SCALE)
    seconds = scratch.load_entries(scale_url, args.scale_rows)
    scratch.truncate_entries(scratch.database_url(url, scratch.MAIN))
    s = scale.run(args.scale_rows, args.rounds, args.requests)
    rows = f"{args.scale_rows:,}"
    sizes = scratch.sizes(scale_url)
    load = f"bulk load of {rows} entries (indexes rebuilt, VACUUM)"
    report.add(SCALE, Row("scale_load", load, seconds, "s"))
    report.add(SCALE, Row("scale_table_mb", "  table with its indexes", sizes["table_mb"], "MB"))
    index = "  of which the unique (tenant, key) index"
    report.add(SCALE, Row("scale_index_mb", index, sizes["unique_index_mb"], "MB"))
    report.timing(SCALE, "claim_new_0", "claim of a new key, 0 rows", s["claim_new_0"])
    report.timing(
        SCALE, "claim_new_loaded", f"claim of a new key, {rows} rows", s["claim_new_loaded"]
    )
    report.ratio(
        SCALE,
        "claim_new_ratio",
        f"new key: {rows} rows / 0 rows",
        _over(s["claim_new_loaded"], s["claim_new_0"]),
    )
    report.timing(
        SCALE,
        "claim_existing_0",
        "claim of an existing key (replay), ~0 rows",
        s["claim_existing_0"],
    )
    report.timing(
        SCALE,
        "claim_existing_loaded",
        f"claim of an existing key (replay), {rows} rows",
        s["claim_existing_loaded"],
    )
    report.ratio(
        SCALE,
        "claim_existing_ratio",
        f"existing key: {rows} rows / ~0 rows",
        _over(s["claim_existing_loaded"], s["claim_existing_0"]),
    )


def _targets(report: Report) -> None:
    rows = {row.key: row for rows in report.sections.values() for row in rows}
    wanted = [
        ("added_over_floor", "added latency of a first execution / floor (in-process)", 1.0, True),
        ("http_added_over_floor", "added latency of a first execution / floor (HTTP)", 1.0, True),
        ("statements_replay_pg", "replay from PostgreSQL: SQL statements", 1, True),
        (
            "first_over_replay_pg",
            "replay from PostgreSQL: times faster than a first execution",
            3.0,
            False,
        ),
        ("statements_replay_redis", "replay from Redis: SQL statements", 0, True),
        ("claim_new_ratio", "claim latency at the loaded size / at 0 rows", 1.2, True),
    ]
    for key, label, goal, at_most in wanted:
        if key in rows:
            row = rows[key]
            report.target(Target(key, label, row.value, row.unit, goal, at_most))


def _purge(report: Report) -> None:
    """bench/purge.py's figures in this table; its own printout goes to the JSON."""
    try:
        from bench import purge
    except ImportError:
        return
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            figures = purge.main()
    except Exception as error:  # noqa: BLE001 - its failure must not cost this run's figures
        print(f"bench: bench/purge.py failed: {error!r}", file=sys.stderr)
        report.extra["purge_error"] = repr(error)
        return
    report.extra["purge_printout"] = printed.getvalue()
    for key, value in figures.items():
        report.add("purge (bench/purge.py)", Row(f"purge_{key}", key, float(value), _unit(key)))


def _unit(key: str) -> str:
    suffixes = {"_per_s": "/s", "_ms": "ms", "_s": "s"}
    return next((unit for suffix, unit in suffixes.items() if key.endswith(suffix)), "")


if __name__ == "__main__":
    sys.exit(main())
