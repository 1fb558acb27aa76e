"""``make stress``: the long reliability run, against the sample project under gunicorn.

For each protocol ("lock", then "lease", each served by its own gunicorn):
storms of duplicates (by default 12,500 keys x 8 concurrent clients, over
100,000 requests) while a monkey SIGKILLs workers and terminates PostgreSQL
backends mid-transaction; then targeted kills, terminations, purges and
requests that outlive their lease (the protocol's own scenarios); then the
database cut away behind a proxy. Prints the table and exits 1 if a single key
committed twice or a single answer broke SPEC.
The tools, scenarios and judge are the system tier's (``tests.system.harness``,
``tests.system.chaos``): this is its long run.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/idempotency python -m bench.stress

``DATABASE_URL`` names the server only: the run creates, migrates and drops its
own database (``idem_sys_stress_<pid>``) on it.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

from tests.system import chaos
from tests.system.chaos import Outcome, StormPlan, Verdict
from tests.system.harness import (
    Monkey,
    SampleServer,
    ScratchDatabase,
    TcpProxy,
    new_keys,
    with_port,
)
from tests.system.scenarios import TARGETED


@dataclass
class Run:
    """Everything the table reports."""

    args: argparse.Namespace
    verdict: Verdict = field(default_factory=Verdict)
    killed: int = 0
    terminated: int = 0
    outages: int = 0
    scenarios: int = 0
    problems: list[str] = field(default_factory=list)
    duplicates: dict[str, int] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    def count(self, outcome: Outcome, protocol: str) -> None:
        self.scenarios += 1
        self.verdict.requests += outcome.requests
        self.verdict.keys += outcome.keys
        self.killed += outcome.scenario in ("kill", "purge")
        self.terminated += outcome.scenario == "terminate"
        self.problems += [f"[{protocol}] {problem}" for problem in outcome.problems]

    @property
    def unexpected(self) -> int:
        return len(self.verdict.unexpected)

    @property
    def ok(self) -> bool:
        return not (self.verdict.broken() or self.problems)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.stress", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--keys", type=int, default=12_500, help="keys in the storm")
    parser.add_argument("--per-key", type=int, default=8, help="concurrent clients per key")
    parser.add_argument("--clients", type=int, default=32, help="client threads")
    parser.add_argument("--workers", type=int, default=4, help="gunicorn worker processes")
    parser.add_argument("--lease", type=int, default=5, help="IDEMPOTENCY_LEASE, seconds")
    parser.add_argument("--rounds", type=int, default=10, help="storm rounds (keys split evenly)")
    parser.add_argument("--monkey", type=float, default=2.0, help="seconds between monkey acts")
    parser.add_argument("--slow-share", type=float, default=0.1, help="keys doing 0.2 s of work")
    parser.add_argument("--targeted", type=int, default=3, help="runs of each targeted scenario")
    parser.add_argument("--seed", type=int, default=6)
    parser.add_argument(
        "--protocols",
        type=protocols,
        default=("lock", "lease"),
        help='comma-separated, each run in full (default "lock,lease")',
    )
    return parser.parse_args(argv)


def protocols(value: str) -> tuple[str, ...]:
    chosen = tuple(name.strip() for name in value.split(",") if name.strip())
    unknown = sorted(set(chosen) - set(TARGETED))
    if not chosen or unknown:
        raise argparse.ArgumentTypeError(f"choose from {', '.join(TARGETED)}; got {value!r}")
    return chosen


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    url = os.environ.get("DATABASE_URL", "")
    if not urlsplit(url).scheme.startswith("postgres"):
        print("bench.stress needs DATABASE_URL=postgres://… (the server only)", file=sys.stderr)
        return 2
    run = Run(args)
    database = ScratchDatabase.tagged(url, "stress")
    database.create()
    try:
        with tempfile.TemporaryDirectory(prefix="idem_sys_stress_") as logs:
            exercise(run, database, url, Path(logs))
    finally:
        database.drop()
    print(report(run))
    return 0 if run.ok else 1


def exercise(run: Run, database: ScratchDatabase, url: str, logs: Path) -> None:
    args = run.args
    for protocol in args.protocols:
        before = run.verdict.duplicates_committed
        log = logs / f"gunicorn-{protocol}.log"
        with SampleServer(database.url, log, args.workers, args.lease, protocol) as server:
            storm_under_monkey(run, server, database, protocol)
            targeted(run, server, database, protocol)
        outage(run, database, url, logs, protocol)
        run.duplicates[protocol] = run.verdict.duplicates_committed - before


def storm_under_monkey(
    run: Run, server: SampleServer, database: ScratchDatabase, protocol: str
) -> None:
    args = run.args
    with Monkey(server, database, args.monkey, seed=args.seed) as monkey:
        for round_ in range(args.rounds):
            plan = StormPlan(
                keys=args.keys // args.rounds,
                per_key=args.per_key,
                clients=args.clients,
                seed=args.seed * 1000 + round_,
                slow_share=args.slow_share,
            )
            verdict = chaos.judge(chaos.storm(server.port, plan), database, chaos=True)
            run.verdict.add(verdict)
            progress(run, f"{protocol}: storm round {round_ + 1}/{args.rounds}", monkey)
    run.killed += monkey.killed
    run.terminated += monkey.terminated


def targeted(run: Run, server: SampleServer, database: ScratchDatabase, protocol: str) -> None:
    for name, scenario in TARGETED[protocol].items():
        for key in new_keys(run.args.targeted, name):
            run.count(scenario(server, database, key), protocol)
        progress(run, f"{protocol}: targeted {name} x{run.args.targeted}")


def outage(run: Run, database: ScratchDatabase, url: str, logs: Path, protocol: str) -> None:
    proxy = TcpProxy(urlsplit(url).port or 5432)
    try:
        proxied = with_port(database.url, proxy.port)
        log = logs / f"proxied-{protocol}.log"
        with SampleServer(proxied, log, 2, run.args.lease, protocol) as server:
            keys = new_keys(50, "outage")
            run.count(chaos.database_outage(server, proxy, database, keys), protocol)
            run.outages += 1
    finally:
        proxy.close()
    progress(run, f"{protocol}: database outage")


def progress(run: Run, step: str, monkey: Monkey | None = None) -> None:
    chaos_line = f", killed {monkey.killed}, terminated {monkey.terminated}" if monkey else ""
    elapsed = time.monotonic() - run.started
    print(
        f"[{elapsed:6.0f}s] {step}: {run.verdict.requests} requests, "
        f"{run.verdict.duplicates_committed} duplicates{chaos_line}",
        file=sys.stderr,
        flush=True,
    )


def report(run: Run) -> str:
    verdict, args = run.verdict, run.args
    elapsed = time.monotonic() - run.started
    rows: list[tuple[str, object]] = [
        ("date", datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")),
        ("duration", f"{elapsed:.0f} s"),
        ("protocols", ", ".join(args.protocols)),
        ("requests", f"{verdict.requests:,}"),
        ("keys", f"{verdict.keys:,}"),
        ("concurrency", f"{args.per_key} clients per key, {args.clients} client threads"),
        ("gunicorn workers", f"{args.workers} (sync), lease {args.lease} s"),
        ("workers killed (SIGKILL)", run.killed),
        ("backends terminated", run.terminated),
        ("database outages", run.outages),
        ("targeted scenarios", run.scenarios),
        (
            "answers",
            f"{verdict.originals:,} originals, {verdict.replays:,} replays, "
            f"{verdict.conflicts:,} 409, {verdict.server_errors:,} 5xx, {verdict.dropped:,} dropped",
        ),
        (
            "duplicates committed",
            f"{verdict.duplicates_committed} "
            f"({', '.join(f'{name}: {n}' for name, n in run.duplicates.items())})",
        ),
        ("unexpected statuses", run.unexpected),
        ("inconsistent answers", len(verdict.inconsistent)),
        ("unfinished keys", len(verdict.unfinished)),
        ("scenario failures", len(run.problems)),
        ("verdict", "PASS" if run.ok else "FAIL"),
    ]
    details = [*verdict.broken(), *run.problems[:20]]
    return "\n".join([table(rows), *details])


def table(rows: list[tuple[str, object]]) -> str:
    """A two-column plain-text table."""
    width = max(len(name) for name, _ in rows)
    lines = [f"{name:<{width}}  {value}" for name, value in rows]
    rule = "-" * max(len(line) for line in lines)
    return "\n".join([rule, *lines, rule])


if __name__ == "__main__":
    sys.exit(main())
