"""``python -m bench`` (``make bench``): both protocols side by side, one table, the same figures as JSON.

PostgreSQL is required: ``DATABASE_URL`` names the server, and the benchmark
works on scratch databases of its own (``idem_bench_<pid>``…), created here and
dropped at the end. Redis (``BENCH_REDIS_URL``, default db 12) adds the replay
cache's rows.
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
from tests.system.harness import with_database

if TYPE_CHECKING:
    from bench.http_cases import Storms
    from bench.receivers import Receivers

RESULTS = Path(__file__).resolve().parent / "results" / "latest.json"
SIDE = "protocols side by side, in-process (Django test client; reference: the same INSERT in atomic())"
WHERE = "where the added latency goes: each path's captured SQL replayed through psycopg"
PREPARED = "lock with server-side binding and prepared statements (not Django's default)"
CACHE = "replay cache (IDEMPOTENCY_CACHE on Redis) on a first execution under lock, in-process"
OBSERVED = "signal receivers on a first execution under lock, in-process"
OUTBOX = "outbox: enqueue() inside a protected view (lock), in-process"
HTTP = "over HTTP: gunicorn, sync workers, loopback client, one connection per request"
STORM = "storm: 64 concurrent requests over HTTP, time until all have an answer"
SCALE = "scale: the claim on an empty table and on a loaded one, alternately"
COUNTS = "SQL statements per request (Django's query capture; BEGIN/COMMIT apart)"
PROTOCOLS = ("lock", "lease")


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    try:
        url = scratch.server_url()
    except scratch.PostgresMissing as missing:
        print(
            f"bench: PostgreSQL is required ({missing}).\n"
            "Run it as: DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python -m bench\n"
            f"(it creates and drops scratch databases named {scratch.MAIN}*).",
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
    if args.purge:
        _purge(report)
    report.meta["load_after"] = _load()
    table = report.render()
    print(table)
    report.write(args.output)
    args.output.with_suffix(".txt").write_text(table + "\n")
    print(f"\nfigures written to {args.output} and {args.output.with_suffix('.txt')}")
    return 0


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--rounds", type=int, default=5, help="rounds per sweep (default 5)")
    parser.add_argument(
        "--requests", type=int, default=300, help="in-process samples per round (300)"
    )
    parser.add_argument(
        "--http-requests", type=int, default=150, help="HTTP samples per round (150)"
    )
    parser.add_argument("--workers", type=int, default=4, help="gunicorn workers (default 4)")
    parser.add_argument(
        "--scale-rows",
        type=int,
        default=0,
        help="entries loaded for the scale case (10,000,000 takes about 1.5 min); 0 skips it",
    )
    parser.add_argument("--skip-http", action="store_true", help="no gunicorn cases")
    parser.add_argument("--purge", action="store_true", help="also run bench/purge.py")
    parser.add_argument("--output", type=Path, default=RESULTS, help=f"JSON file ({RESULTS})")
    args = parser.parse_args(argv)
    if args.workers < 3 and not args.skip_http:
        # Each protocol's 409 case keeps one request held in a worker: with fewer than
        # three, the duplicates queue behind the holders and are answered after them.
        parser.error("--workers must be 3 or more for the HTTP cases (or --skip-http)")
    return args


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
    os.environ["BENCH_DATABASE"] = scratch.MAIN
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
        for alias in ("replay", "replay_generic"):
            cache = caches[alias]
            pattern = cache.make_key("*")  # our prefix only, never the whole db
            client = cache._cache.get_client(write=True) if alias == "replay_generic" else None  # type: ignore[attr-defined]
            if client is None:
                cache.delete_pattern("*")  # type: ignore[attr-defined]  # django-redis
            else:
                for name in client.scan_iter(pattern):
                    client.delete(name)


def _run(url: str, args: argparse.Namespace, report: Report) -> None:
    from bench import inprocess

    series, counts, observed = inprocess.run(
        with_database(url, scratch.MAIN), args.rounds, args.requests
    )
    _side_by_side(report, series)
    _where_it_goes(report, series)
    _prepared(report, series)
    if "lock_cached" in series:
        _cache(report, series)
    _observed(report, series, observed)
    _outbox(report, series, counts)
    _statement_counts(report, counts)
    if not args.skip_http:
        _over_http(url, args, report, inprocess.redis_available())
    if args.scale_rows:
        _scale(url, args, report)
    _targets(report)


def _minus(left: Series, right: Series) -> Series:
    return per_round(lambda a, b: a - b, left, right)


def _over(numerator: Series, denominator: Series) -> Series:
    return per_round(lambda n, d: n / d, numerator, denominator)


def _added(s: dict[str, Series], protocol: str, prefix: str = "") -> Series:
    return _minus(s[f"{prefix}{protocol}"], s[f"{prefix}unprotected"])


def _floor(s: dict[str, Series], protocol: str, binding: str = "floor") -> Series:
    return s[f"{binding}_{protocol}"]


def _side_by_side(report: Report, s: dict[str, Series]) -> None:
    lock, lease = _added(s, "lock"), _added(s, "lease")
    report.timing(SIDE, "unprotected", "unprotected view (reference)", s["unprotected"])
    report.timing(SIDE, "autocommit", "  the same INSERT without atomic()", s["autocommit"])
    for protocol, added in (("lock", lock), ("lease", lease)):
        report.timing(SIDE, protocol, f"{protocol}: first execution", s[protocol])
        report.timing(SIDE, f"added_{protocol}", f"{protocol}: added latency", added)
    report.ratio(SIDE, "lock_over_lease", "added latency, lock / lease", _over(lock, lease))
    reference = "business transaction alone, psycopg (for scale)"
    report.timing(SIDE, "floor_reference", reference, s["floor_reference"])
    report.timing(SIDE, "floor_lock", "floor lock: +INSERT +UPDATE in the txn", _floor(s, "lock"))
    report.timing(
        SIDE, "floor_lease", "floor lease: +INSERT committed first, +UPDATE", _floor(s, "lease")
    )
    django_floor = _floor(s, "lock", "floor_django")
    report.timing(
        SIDE, "floor_django_lock", "floor lock, bound client-side like Django", django_floor
    )
    report.ratio(
        SIDE, "lock_over_floor", "lock: added latency / floor lock", _over(lock, _floor(s, "lock"))
    )
    report.ratio(
        SIDE,
        "lock_over_django_floor",
        "  / floor lock bound like Django",
        _over(lock, django_floor),
    )
    report.ratio(
        SIDE,
        "lease_over_floor",
        "lease: added latency / floor lease",
        _over(lease, _floor(s, "lease")),
    )
    for protocol in PROTOCOLS:
        name = f"replay_pg_{protocol}"
        report.timing(SIDE, name, f"{protocol}: replay from PostgreSQL", s[name])
    if "replay_redis" in s:
        report.timing(
            SIDE, "replay_redis", "replay from Redis (either protocol)", s["replay_redis"]
        )
    for protocol in PROTOCOLS:
        name = f"conflict_{protocol}"
        report.timing(SIDE, name, f"{protocol}: 409, the key held by a request in flight", s[name])


def _where_it_goes(report: Report, s: dict[str, Series]) -> None:
    report.timing(WHERE, "sql_unprotected", "SQL of the reference", s["sql_unprotected"])
    for protocol in PROTOCOLS:
        sql_added = _minus(s[f"sql_{protocol}"], s["sql_unprotected"])
        share = per_round(lambda sql, total: 100 * sql / total, sql_added, _added(s, protocol))
        report.timing(
            WHERE, f"sql_{protocol}", f"SQL of a {protocol} first execution", s[f"sql_{protocol}"]
        )
        report.timing(WHERE, f"sql_added_{protocol}", f"  SQL added by {protocol}", sql_added)
        label = "  share of its added latency spent in SQL"
        report.add(WHERE, Row(f"sql_share_{protocol}", label, share.median, "%", share.spread))
        own = s[f"own_sql_{protocol}"]
        label = f"  {protocol}'s own statements alone (the floor's way of timing)"
        report.timing(WHERE, f"own_sql_{protocol}", label, own)
        floor = _floor(s, protocol, "floor_django")
        ratio = _over(own, floor)
        label = "  / its floor bound like Django: the statements' own weight"
        report.ratio(WHERE, f"own_sql_{protocol}_over_floor", label, ratio)
        if protocol == "lock":
            _own_statements(report, s)


def _own_statements(report: Report, s: dict[str, Series]) -> None:
    pairs = (
        ("claim", "own_claim_lock", "floor_django_insert", "the claim (lock, INSERT, SELECT)"),
        ("record", "own_record_lock", "floor_django_update", "the record (UPDATE)"),
    )
    for name, own, floor, label in pairs:
        report.timing(WHERE, own, f"    {label}", s[own])
        report.timing(WHERE, floor, f"    the floor's {name}, bound like Django", s[floor])
    report.timing(WHERE, "commit_lock", "  its COMMIT", s["commit_lock"])
    report.timing(WHERE, "commit_unprotected", "  the reference's COMMIT", s["commit_unprotected"])


def _prepared(report: Report, s: dict[str, Series]) -> None:
    added = _minus(s["lock_prepared"], s["unprotected_prepared"])
    report.timing(PREPARED, "unprotected_prepared", "reference", s["unprotected_prepared"])
    report.timing(PREPARED, "lock_prepared", "lock: first execution", s["lock_prepared"])
    report.timing(PREPARED, "added_lock_prepared", "lock: added latency", added)
    ratio = _over(added, _floor(s, "lock"))
    report.ratio(PREPARED, "lock_prepared_over_floor", "lock: added latency / floor lock", ratio)


def _cache(report: Report, s: dict[str, Series]) -> None:
    costs = {
        "now": ("lock_cached", "now (raw redis-py client, compact, SET PX)"),
        "generic": ("lock_cached_generic", "now, generic path (Django's RedisCache)"),
    }
    for name, (case, label) in costs.items():
        report.timing(
            CACHE, f"cache_cost_{name}", f"cache's cost, {label}", _minus(s[case], s["lock"])
        )
    ops = "alone: GET (miss) + SET of one answer"
    report.timing(CACHE, "ops_cache_now", f"{ops}, now", s["ops_cache_now"])
    get = "alone: the GET a WSGI client waits for, now (SET after the response)"
    report.timing(CACHE, "ops_cache_now_get", get, s["ops_cache_now_get"])
    report.timing(CACHE, "added_lock_nocache", "lock: added latency, no cache", _added(s, "lock"))
    added = _minus(s["lock_cached"], s["unprotected"])
    report.timing(CACHE, "added_lock_cached", "lock: added latency, cache now", added)
    for suffix, label in (("", "now"), ("_generic", "generic path")):
        name = f"replay_redis{suffix}"
        report.timing(CACHE, f"{name}_cache", f"replay from Redis, {label}", s[name])


def _observed(report: Report, s: dict[str, Series], observed: Receivers) -> None:
    added = _added(s, "lock")
    on = _minus(s["lock_observed"], s["unprotected"])
    growth = per_round(lambda o, a: 100 * (o - a) / a, on, added)
    report.timing(OBSERVED, "added_lock_quiet", "lock: added latency, no receivers", added)
    label = "lock: added latency, receivers on"
    report.timing(OBSERVED, "added_lock_observed", label, on, observed.label)
    report.add(
        OBSERVED,
        Row("receivers_growth", "growth of the added latency", growth.median, "%", growth.spread),
    )
    quiet, loud = s["ops_signal_quiet"], s["ops_signal_observed"]
    report.timing(
        OBSERVED, "ops_signal_quiet", "alone: one outcome signal, log receiver only", quiet
    )
    report.timing(OBSERVED, "ops_signal_observed", "alone: one outcome signal, receivers on", loud)
    share = per_round(lambda o, q, a: 100 * (o - q) / a, loud, quiet, added)
    label = "receivers' own time / added latency"
    report.add(OBSERVED, Row("receivers_share", label, share.median, "%", share.spread))
    for index, name in enumerate(observed.names):
        if f"ops_signal_only_{index}" in s:
            own = _minus(s[f"ops_signal_only_{index}"], quiet)
            report.timing(OBSERVED, f"ops_signal_only_{index}", f"  of which {name}", own)


def _outbox(report: Report, s: dict[str, Series], counts: dict[str, int]) -> None:
    if "lock_enqueue" not in s:
        note = "idempotency_django.outbox is not on this checkout"
        report.add(OUTBOX, Row("enqueue_missing", "not measured", float("nan"), "", None, note))
        return
    report.timing(OUTBOX, "lock_enqueue", "lock: first execution with enqueue()", s["lock_enqueue"])
    cost = _minus(s["lock_enqueue"], s["lock"])
    report.timing(OUTBOX, "enqueue_cost", "enqueue()'s cost (with - without)", cost)
    in_view = _minus(s["lock_enqueue_relayed"], s["lock"])
    label = "  of which in the view's transaction (its INSERT)"
    report.timing(OUTBOX, "enqueue_in_view", label, in_view)
    fast = _minus(s["lock_enqueue"], s["lock_enqueue_relayed"])
    label = "  of which the fast path after the commit (own txn, publish)"
    report.timing(OUTBOX, "enqueue_fast_path", label, fast)
    extra = counts["first_enqueue"] - counts["first_lock"]
    report.add(
        OUTBOX,
        Row(
            "enqueue_statements",
            "statements enqueue() adds (in the view, and its fast path after the commit)",
            extra,
            "",
        ),
    )


def _statement_counts(report: Report, counts: dict[str, int]) -> None:
    view = counts["first_unprotected"]
    labels = {
        "first_unprotected": "reference (the view's INSERT)",
        "first_unprotected_round_trips": "  its round trips (at the wire)",
        "first_lock": f"lock: first execution ({view} of them the view's)",
        "first_lock_round_trips": "  its round trips (at the wire)",
        "first_lease": f"lease: first execution ({view} of them the view's)",
        "first_lease_round_trips": "  its round trips (at the wire)",
        "replay_pg_lock": "lock: replay from PostgreSQL",
        "replay_pg_lock_round_trips": "  its round trips",
        "replay_pg_lease": "lease: replay from PostgreSQL",
        "replay_pg_lease_round_trips": "  its round trips",
        "conflict_lock": "lock: 409",
        "conflict_lock_round_trips": "  its round trips",
        "conflict_lease": "lease: 409",
        "conflict_lease_round_trips": "  its round trips",
        "first_lock_cached": "lock with the cache: first execution (+ GET and SET on Redis)",
        "replay_redis": "replay from Redis",
        "first_enqueue": "lock with enqueue(): first execution",
    }
    for key, label in labels.items():
        if key in counts:
            report.add(COUNTS, Row(f"statements_{key}", label, counts[key], ""))


def _over_http(url: str, args: argparse.Namespace, report: Report, redis: bool) -> None:
    from bench import http_cases
    from bench.floor import floor_samples

    env = http_cases.environment(url, scratch.MAIN)
    floor_url = with_database(url, scratch.MAIN)
    with http_cases.served(args.workers, env) as client:
        with floor_samples(floor_url) as floors:
            s = http_cases.sequential(client, redis, args.rounds, args.http_requests, floors)
        storms = http_cases.storms(client, redis, args.rounds)
    note = f"{args.workers} workers"
    report.timing(
        HTTP, "http_unprotected", "unprotected view (reference)", s["http_unprotected"], note
    )
    lock, lease = _added(s, "lock", "http_"), _added(s, "lease", "http_")
    for protocol, added in (("lock", lock), ("lease", lease)):
        report.timing(
            HTTP, f"http_{protocol}", f"{protocol}: first execution", s[f"http_{protocol}"]
        )
        report.timing(HTTP, f"http_added_{protocol}", f"{protocol}: added latency", added)
    report.ratio(HTTP, "http_lock_over_lease", "added latency, lock / lease", _over(lock, lease))
    floor_lock = _floor(s, "lock")
    report.timing(HTTP, "http_floor_lock", "floor lock, sampled in the same rounds", floor_lock)
    report.ratio(
        HTTP, "http_lock_over_floor", "lock: added latency / floor lock", _over(lock, floor_lock)
    )
    ratio = _over(lease, _floor(s, "lease"))
    report.ratio(HTTP, "http_lease_over_floor", "lease: added latency / floor lease", ratio)
    for protocol in PROTOCOLS:
        name = f"http_replay_pg_{protocol}"
        report.timing(HTTP, name, f"{protocol}: replay from PostgreSQL", s[name])
    if redis:
        report.timing(HTTP, "http_replay_redis", "replay from Redis", s["http_replay_redis"])
        cost = _minus(s["http_lock_cached"], s["http_lock"])
        name = "lock: the replay cache's cost on a first execution, now"
        report.timing(HTTP, "http_cache_cost", name, cost)
    for protocol in PROTOCOLS:
        name = f"http_conflict_{protocol}"
        report.timing(HTTP, name, f"{protocol}: 409, the key held by a request in flight", s[name])
    _storms(report, storms)


def _storms(report: Report, storms: Storms) -> None:
    labels = {
        "storm_lock": "one new key, lock",
        "storm_lease": "one new key, lease",
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
    report.extra["storm_answers"] = storms.answers


def _scale(url: str, args: argparse.Namespace, report: Report) -> None:
    from bench import scale

    scale_url = with_database(url, scratch.SCALE)
    seconds = scratch.load_entries(scale_url, args.scale_rows)
    scratch.truncate_entries(with_database(url, scratch.MAIN))
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
        ("lock_over_lease", "added latency lock / lease (in-process)", 0.6, True),
        ("http_lock_over_lease", "added latency lock / lease (HTTP)", 0.6, True),
        ("lock_over_floor", "lock: added latency / floor (in-process)", 1.0, True),
        ("http_lock_over_floor", "lock: added latency / floor (HTTP)", 1.0, True),
        ("lock_over_floor", "  stretch (in-process)", 0.7, True),
        ("receivers_growth", "receivers on: growth of the added latency", 5.0, True),
        ("receivers_share", "receivers on: their own time / added latency", 5.0, True),
        ("statements_replay_pg_lock", "replay from PostgreSQL: SQL statements", 1, True),
        ("statements_replay_redis", "replay from Redis: SQL statements", 0, True),
        ("storm_executions", "executions per one-key storm", 1, True),
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
