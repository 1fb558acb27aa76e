"""``python -m bench.cpu_profile``: where the library's CPU goes, by module and by function.

``bench.cpu``'s set-up (its views, a scratch PostgreSQL database, the test
client) under ``cProfile``: ``--requests`` first executions, then as many
replays from the database, each profiled apart. The tables (reStructuredText,
for docs/performance.rst) give per request, in microseconds of profiled CPU:

- each of the package's modules: its functions' own time, and the calls into it;
- the package's functions with the most own time, with their cumulative time
  (nested calls of the same function counted once, as ``cProfile`` does);
- the functions outside the package that it calls directly (Django, psycopg, the
  standard library), with the time spent in them on its behalf;
- both summed by part of the walk (statements, sealing, fingerprint, orchestration...),
  what is called outside counted for the part that called it. A call outside that calls
  the package back (``atomic()``'s exit running an ``on_commit`` hook) is counted twice.

The profiler's own cost per call inflates small functions: read the shares, not
the absolute figures (``python -m bench.cpu`` measures without it). So first, with
no cost per call, ``--sampled`` requests of each case under a CPU-time timer
(``ITIMER_PROF``): each tick is counted for the part of the walk whose code is the
innermost of the package on the stack (what it calls outside included), or for
what runs outside the package (the view, Django's handler, the test client).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python -m bench.cpu_profile
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import pstats
import re
import signal
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from bench import cpu, scratch
from tests.system.harness import with_database

Key = tuple[str, int, str]  # pstats: (file, line, function)


def _profile(sample: Callable[[], float], requests: int) -> pstats.Stats:
    profiler = cProfile.Profile(time.process_time)
    for _ in range(requests):
        profiler.enable()
        sample()
        profiler.disable()
    return pstats.Stats(profiler)


def _package(path: str) -> str | None:
    """The package's module a file is, ``_protocol.core``, or None outside the package."""
    import idempotency_django

    root = Path(idempotency_django.__file__).parent
    try:
        relative = Path(path).resolve().relative_to(root)
    except ValueError:
        return None
    return ".".join(relative.with_suffix("").parts).removesuffix(".__init__") or "__init__"


def _outside(path: str) -> str | None:
    """A module outside the package, shortened; None for what only wraps the package's own
    code (a ``@contextmanager``'s enter and exit run the package's generator) or the view."""
    if "contextlib" in path or path.startswith(str(cpu.ROOT / "bench")):
        return None
    return re.sub(r".*(site-packages|lib/python3\.\d+)/", "", path).removesuffix(".py")


# The package's modules by part of the walk (first match of a module's name prefix).
AREAS = (
    ("_storage.store", "statements (_storage.store, driver_cursors)"),
    ("_storage.driver_cursors", "statements (_storage.store, driver_cursors)"),
    ("_storage.seal", "sealing (seal, secret)"),
    ("_storage.secret", "sealing (seal, secret)"),
    ("_storage.cache", "replay cache (_storage.cache)"),
    ("_protocol.fingerprint", "fingerprint (fingerprint, canonical)"),
    ("_protocol.canonical", "fingerprint (fingerprint, canonical)"),
    ("databases", "watching other databases (databases)"),
    ("signals", "observation (signals, _operations.log)"),
    ("_operations.log", "observation (signals, _operations.log)"),
    ("", "orchestration (core, execution, decorators, options, ...)"),
)


def _area(module: str) -> str:
    return next(area for prefix, area in AREAS if module.startswith(prefix))


@dataclass
class Profile:
    """One case's profile, per request, in µs: the package's and what it called outside."""

    modules: dict[str, list[float]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))
    functions: list[tuple[float, float, float, str]] = field(default_factory=list)
    outside: dict[str, list[float]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))
    areas: dict[str, list[float]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))

    @classmethod
    def of(cls, stats: pstats.Stats, requests: int) -> Profile:
        found, scale = cls(), 1e6 / requests
        raw: dict[Key, Any] = stats.stats  # type: ignore[attr-defined]
        for (path, line, name), (_, calls, own, cumulative, callers) in raw.items():
            module = _package(path)
            if module is not None:
                found.modules[module][0] += own * scale
                found.modules[module][1] += calls / requests
                found.areas[_area(module)][0] += own * scale
                where = f"{module}.{name}:{line}"
                found.functions.append((own * scale, cumulative * scale, calls / requests, where))
                continue
            short = _outside(path)
            for caller, (_, ncalls, _, spent) in callers.items():
                by = _package(caller[0])
                if short is not None and by is not None:
                    found.outside[f"{short}.{name}"][0] += spent * scale
                    found.outside[f"{short}.{name}"][1] += ncalls / requests
                    found.areas[_area(by)][1] += spent * scale
        return found

    def tables(self, top: int) -> str:
        total = sum(own for own, _ in self.modules.values())
        out = sum(spent for _, spent in self.areas.values())
        areas = sorted(self.areas.items(), key=lambda kv: -sum(kv[1]))
        modules = sorted(self.modules.items(), key=lambda kv: -kv[1][0])
        outside = sorted(self.outside.items(), key=lambda kv: -kv[1][0])[:top]
        return "\n\n".join(
            [
                f"the package's own time {total:.0f} µs, and {out:.0f} µs in what it called "
                "outside (Django, psycopg, the standard library), per request (profiled)",
                _rst(
                    ("part of the walk", "own µs", "called outside µs", "share"),
                    [
                        (a, f"{o:.0f}", f"{c:.0f}", f"{100 * (o + c) / (total + out):.0f} %")
                        for a, (o, c) in areas
                    ],
                ),
                _rst(
                    ("module", "own µs", "share", "calls"),
                    [
                        (m, f"{o:.0f}", f"{100 * o / total:.0f} %", f"{c:.0f}")
                        for m, (o, c) in modules
                    ],
                ),
                _rst(
                    ("function", "own µs", "cumulative µs", "calls"),
                    [
                        (where, f"{o:.0f}", f"{cum:.0f}", f"{c:g}")
                        for o, cum, c, where in sorted(self.functions, reverse=True)[:top]
                    ],
                ),
                _rst(
                    ("called outside the package", "µs", "calls"),
                    [(where, f"{spent:.0f}", f"{c:g}") for where, (spent, c) in outside],
                ),
            ]
        )


# The CPU timer's period: the kernel checks process CPU timers at its tick, so a shorter
# one is rounded up; what counts is the number of samples, over many requests.
PERIOD = 0.001
VIEW = "outside the package: the view, Django's handler, the test client"


def sampled(sample: Callable[[], float], requests: int) -> tuple[Counter[str], float]:
    """Where the process's CPU goes over ``requests`` samples, by a CPU-time timer
    (``ITIMER_PROF``: user and system time), with no cost per call: each tick is
    counted for the innermost frame of the package on the stack (its part of the walk,
    the calls it makes outside included), or for the view and Django around it.
    Returns the ticks and the CPU spent, in seconds."""
    ticks: Counter[str] = Counter()

    def tick(signum: int, frame: FrameType | None) -> None:
        ticks[_innermost(frame)] += 1

    previous = signal.signal(signal.SIGPROF, tick)
    started = time.process_time()
    signal.setitimer(signal.ITIMER_PROF, PERIOD, PERIOD)
    try:
        for _ in range(requests):
            sample()
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0, 0)
        signal.signal(signal.SIGPROF, previous)
    return ticks, time.process_time() - started


def _innermost(frame: FrameType | None) -> str:
    while frame is not None:
        path = frame.f_code.co_filename
        if path.startswith(str(cpu.ROOT / "bench")):
            return VIEW
        module = _package(path)
        if module is not None:
            return _area(module)
        frame = frame.f_back
    return VIEW


def sampled_table(ticks: Counter[str], spent: float, requests: int) -> str:
    total = sum(ticks.values())
    per_request = spent / requests * 1e6
    rows = [
        (where, f"{count}", f"{100 * count / total:.0f} %", f"{count / total * per_request:.0f}")
        for where, count in ticks.most_common()
    ]
    return (
        f"sampled: {total} ticks of the CPU timer over {requests} requests, "
        f"{per_request:.0f} µs of CPU per request in all (no profiler's cost)\n\n"
        + _rst(("where the CPU timer ticked", "ticks", "share", "µs per request"), rows)
    )


def _rst(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    rule = "  ".join("=" * width for width in widths)

    def line(row: tuple[str, ...]) -> str:
        return "  ".join(
            cell.ljust(width) for cell, width in zip(row, widths, strict=True)
        ).rstrip()

    return "\n".join([rule, line(header), rule, *map(line, rows), rule])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cpu_profile", description=__doc__)
    parser.add_argument("--requests", type=int, default=500, help="profiled requests per case")
    parser.add_argument(
        "--sampled", type=int, default=3000, help="requests per case under the CPU timer"
    )
    parser.add_argument("--top", type=int, default=25, help="rows in the function tables")
    parser.add_argument(
        "--cases",
        nargs="+",
        choices=list(cpu.CASES),
        default=["first", "replay_db"],
        help="bench.cpu's cases to profile (first, replay_db)",
    )
    args = parser.parse_args(argv)
    url = scratch.server_url()
    with scratch.databases(url, [scratch.MAIN]):
        cpu.configure(with_database(url, scratch.MAIN))
        from django.core.management import call_command

        import idempotency_django

        call_command("migrate", verbosity=0)
        load = cpu.load()
        try:
            pairs = cpu.pairs()
            for protected, _ in pairs.values():
                for _ in range(50):  # warm: imports, one-time set-up
                    protected()
            profiled = {case: _profile(pairs[case][0], args.requests) for case in args.cases}
            ticked = {case: sampled(pairs[case][0], args.sampled) for case in args.cases}
        finally:
            cpu.close()
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="minutes")
    print(
        f"idempotency_django {idempotency_django.__version__}, {now}, load {load} -> {cpu.load()}"
    )
    print(
        f"python -m bench.cpu_profile --requests {args.requests} --sampled {args.sampled} "
        "(cProfile and a CPU-time timer)"
    )
    for case, stats in profiled.items():
        print(f"\n{cpu.CASES[case][0]}, {args.requests} requests\n")
        print(sampled_table(*ticked[case], args.sampled) + "\n")
        print(Profile.of(stats, args.requests).tables(args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
