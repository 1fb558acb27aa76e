"""``python -m bench.cpu``: the library's own CPU per request, beside the same view without it.

What is measured is the process CPU time (``time.process_time()``) of the one
process that runs Django's test client, the views and the library, on
PostgreSQL: on a shared machine, wall time counts other processes' turns, CPU
time mostly does not. Four cases, each beside a view without the library:

- ``first``: a first execution of a protected view (``@idempotent(protocol="lock")``
  around one INSERT), beside the same INSERT in ``atomic()``;
- ``replay, database``: a retry of a completed key answered from the entries'
  database, beside a view answering the same JSON without the database;
- ``replay, cache``: the same from the replay cache (the ``cache=`` option naming a
  django-redis cache: ``BENCH_REDIS_URL``, else ``REDIS_URL``, else Redis db 12);
- ``marked retry``: a retry carrying ``Idempotency-Retry: 1`` (as
  ``idempotency_django.client`` sends it), answered from the database.

The cases are interleaved in blocks (10 protected requests, then 10 of their
reference, case after case), ``--blocks`` times per round; a case's figure in a
round is the median of its protected requests minus the median of its reference;
the table shows the median over rounds and their range, and the load average
before and after.

The module uses only the public ``@idempotent`` and settings, so that it runs
unchanged against an older release: ``--compare PYTHON`` runs it whole, in
subprocesses, alternately under this checkout and under ``PYTHON`` (a virtualenv
with, say, 0.4.3 installed; docs/performance.rst says how), ``--runs`` times each,
and prints both side by side with their ratio and issue 55's targets.
``--compare DIRECTORY`` does the same with another checkout's package (say, the
commit before a change: ``git archive``) under this interpreter.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python -m bench.cpu
    ... python -m bench.cpu --compare /tmp/idem_v043/venv/bin/python --runs 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import scratch
from bench.measure import Series, per_round
from tests.system.harness import with_database

ROOT = Path(__file__).resolve().parents[1]
BODY = json.dumps({"amount": 100})
BLOCK = 10
RETRY = {"Idempotency-Retry": "1"}
# case: (label, protected path, a fresh key per request, extra headers, reference path, goal)
CASES: dict[str, tuple[str, str, bool, dict[str, str], str, float]] = {
    "first": ("first execution", "/lock/", True, {}, "/plain/", 0.5),
    "replay_db": ("replay, database", "/lock/", False, {}, "/answer/", 0.75),
    "replay_cache": ("replay, cache", "/cached/", False, {}, "/answer/", 0.75),
    "marked": ("marked retry (database)", "/lock/", False, RETRY, "/answer/", 0.75),
}
REFERENCES = {"/plain/": "the same INSERT in atomic()", "/answer/": "the same JSON, no database"}

urlpatterns: list[Any] = []  # filled once Django is set up (``@idempotent`` reads settings)


def _redis_url() -> str:
    return os.environ.get("BENCH_REDIS_URL") or os.environ.get(
        "REDIS_URL", "redis://127.0.0.1:6379/12"
    )


def configure(url: str) -> None:
    """Django on the scratch database ``url`` (persistent connection), the views routed."""
    import dj_database_url
    import django
    from django.conf import settings

    settings.configure(
        SECRET_KEY="bench-only-not-secret",
        DEBUG=False,
        USE_TZ=True,
        ALLOWED_HOSTS=["*"],
        ROOT_URLCONF=__name__,
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        INSTALLED_APPS=["django.contrib.auth", "django.contrib.contenttypes", "idempotency_django"],
        MIDDLEWARE=[],
        DATABASES={"default": dict(dj_database_url.parse(url, conn_max_age=600))},
        CACHES={
            "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
            "replay": {
                "BACKEND": "django_redis.cache.RedisCache",
                "LOCATION": _redis_url(),
                "KEY_PREFIX": scratch.MAIN,  # this run's keys only
            },
        },
        LOGGING={
            "version": 1,
            "disable_existing_loggers": False,
            "handlers": {"null": {"class": "logging.NullHandler"}},
            "loggers": {"django.request": {"handlers": ["null"], "propagate": False}},
        },
    )
    django.setup()
    _route()


def _route() -> None:
    from django.contrib.auth.models import Group
    from django.db import transaction
    from django.http import HttpRequest, HttpResponse, JsonResponse
    from django.urls import path

    from idempotency_django import idempotent

    def business(request: HttpRequest) -> HttpResponse:
        group = Group.objects.create(name=request.headers["Idempotency-Key"])
        return JsonResponse({"id": group.pk, "amount": 100}, status=201)

    def plain(request: HttpRequest) -> HttpResponse:
        with transaction.atomic():
            return business(request)

    def answer(request: HttpRequest) -> HttpResponse:
        return JsonResponse({"id": 1, "amount": 100}, status=201)

    urlpatterns.extend(
        [
            path("plain/", plain),
            path("answer/", answer),
            path("lock/", idempotent(protocol="lock")(business)),
            path("cached/", idempotent(protocol="lock", cache="replay")(business)),
        ]
    )


def _sample(
    path: str, key: str | None, headers: dict[str, str], replayed: bool
) -> Callable[[], float]:
    """One request's process CPU time (a fresh key unless ``key``); its answer checked."""
    from django.test import Client

    client = Client()

    def sample() -> float:
        started = time.process_time()
        response = client.post(
            path,
            BODY,
            content_type="application/json",
            headers={"Idempotency-Key": key or str(uuid.uuid4()), **headers},
        )
        spent = time.process_time() - started
        if response.status_code != 201 or response.has_header("Idempotent-Replayed") != replayed:
            raise RuntimeError(f"bench.cpu: {path} answered {response.status_code}")
        return spent

    return sample


def pairs() -> dict[str, tuple[Callable[[], float], Callable[[], float]]]:
    """Each case's (protected, reference) samplers; the replays' keys completed first."""
    pairs = {}
    for case, (_, path, fresh, headers, reference, _) in CASES.items():
        key = None if fresh else str(uuid.uuid4())
        if key is not None:
            _sample(path, key, {}, replayed=False)()  # its first execution
        pairs[case] = (_sample(path, key, headers, not fresh), _sample(reference, key, {}, False))
    _check_cache(pairs["replay_cache"][0])
    return pairs


def _check_cache(replay: Callable[[], float]) -> None:
    """The cache case's replays send no SQL once the first replay has filled the cache."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    replay()
    with CaptureQueriesContext(connection) as captured:
        replay()
    if captured.captured_queries:
        raise RuntimeError("bench.cpu: the cache case's replay reached the database (no Redis?)")


def sweep(rounds: int, blocks: int, warmup: int = 3) -> dict[str, dict[str, list[float]]]:
    """Per case, the round medians of its protected requests and of its reference."""
    samplers = pairs()
    for _ in range(warmup):
        for protected, reference in samplers.values():
            for sample in (protected, reference) * BLOCK:
                sample()
    found: dict[str, dict[str, list[float]]] = {
        case: {"library": [], "reference": []} for case in samplers
    }
    for _ in range(rounds):
        spent: dict[str, tuple[list[float], list[float]]] = {case: ([], []) for case in samplers}
        for _ in range(blocks):
            for case, (protected, reference) in samplers.items():
                spent[case][0].extend(protected() for _ in range(BLOCK))
                spent[case][1].extend(reference() for _ in range(BLOCK))
        for case, (library, plain) in spent.items():
            found[case]["library"].append(statistics.median(library))
            found[case]["reference"].append(statistics.median(plain))
    return found


def load() -> str:
    return "/".join(f"{value:.2f}" for value in os.getloadavg())


def measure(rounds: int, blocks: int) -> dict[str, Any]:
    """One whole run on a scratch database of its own, as a JSON-able dict."""
    url = scratch.server_url()
    with scratch.databases(url, [scratch.MAIN]):
        configure(with_database(url, scratch.MAIN))
        from django.core.management import call_command

        import idempotency_django

        call_command("migrate", verbosity=0)
        before = load()
        try:
            cases = sweep(rounds, blocks)
        finally:
            close()
    return {
        "version": idempotency_django.__version__,
        "package": idempotency_django.__file__,
        "load": [before, load()],
        "cases": cases,
    }


def close() -> None:
    """The run's database connections closed, and its keys in Redis deleted."""
    from django.core.cache import caches
    from django.db import connections

    connections.close_all()
    caches["replay"].delete_pattern("*")  # type: ignore[attr-defined]  # django-redis: this run's


def _series(medians: list[float]) -> Series:
    return Series([[value] for value in medians])


def added(run: dict[str, Any], case: str) -> Series:
    """The library's CPU in ``case``, round by round: protected minus reference."""
    figures = run["cases"][case]
    return per_round(lambda a, b: a - b, _series(figures["library"]), _series(figures["reference"]))


def _ms(series: Series) -> str:
    low, high = series.spread
    return f"{series.median * 1e3:.3f} ({low * 1e3:.3f}..{high * 1e3:.3f})"


def table(run: dict[str, Any]) -> str:
    lines = [
        f"idempotency_django {run['version']} ({run['package']})",
        f"load (1/5/15 min) before: {run['load'][0]}, after: {run['load'][1]}",
        f"{'case':26} {'added CPU ms, median (range)':30} reference's CPU ms (view)",
    ]
    for case, (label, _, _, _, reference, _) in CASES.items():
        plain = _series(run["cases"][case]["reference"]).median * 1e3
        lines.append(f"{label:26} {_ms(added(run, case)):30} {plain:.3f} ({REFERENCES[reference]})")
    return "\n".join(lines)


def merged(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Several runs of one side as one: their rounds together, every run's load."""
    cases = {
        case: {
            side: [value for run in runs for value in run["cases"][case][side]]
            for side in ("library", "reference")
        }
        for case in CASES
    }
    load = [" ".join(f"{run['load'][0]}->{run['load'][1]}" for run in runs), ""]
    return {**runs[0], "cases": cases, "load": load}


def comparison(ours: dict[str, Any], theirs: dict[str, Any]) -> str:
    lines = [
        f"this checkout: {ours['version']} ({ours['package']})",
        f"against: {theirs['version']} ({theirs['package']})",
        f"load per run, this checkout: {ours['load'][0]}",
        f"load per run, {theirs['version']}: {theirs['load'][0]}",
        f"{'case':26} | {'this checkout, ms (range)':26} | "
        f"{theirs['version'] + ', ms (range)':26} | ratio | target",
    ]
    for case, (label, *_, goal) in CASES.items():
        mine, old = added(ours, case), added(theirs, case)
        ratio = mine.median / old.median
        met = "met" if ratio <= goal else "not met"
        lines.append(
            f"{label:26} | {_ms(mine):26} | {_ms(old):26} | {ratio:5.2f} | <= {goal} ({met})"
        )
    return "\n".join(lines)


def _child(against: str | None, args: argparse.Namespace) -> dict[str, Any]:
    """One whole run in a subprocess: this checkout's (``against`` None), another
    interpreter's install, or another checkout's package under this interpreter.

    The other side runs from a directory holding only links to this checkout's ``bench``
    and ``tests`` (and, for a checkout, to its ``idempotency_django``), so that the
    package it imports is the one meant, never this checkout's."""
    python = sys.executable
    command = ["-m", "bench.cpu", "--json", "--rounds", str(args.rounds)]
    command += ["--blocks", str(args.blocks)]
    env = {key: value for key, value in os.environ.items() if key != "BENCH_DATABASE"}
    with tempfile.TemporaryDirectory(prefix="bench_cpu_") as where:
        cwd = ROOT
        if against is not None:
            cwd = Path(where)
            links = {name: ROOT / name for name in ("bench", "tests")}
            if Path(against).is_dir():
                links["idempotency_django"] = Path(against).resolve() / "idempotency_django"
            else:
                python = against
            for name, target in links.items():
                (cwd / name).symlink_to(target)
        done = subprocess.run([python, *command], cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"bench.cpu: {python} {' '.join(command)} failed:\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def compare(args: argparse.Namespace) -> str:
    """Whole runs alternately (this checkout, the other, this checkout...)."""
    ours: list[dict[str, Any]] = []
    theirs: list[dict[str, Any]] = []
    for index in range(args.runs):
        for against, runs in ((None, ours), (args.compare, theirs)):
            runs.append(_child(against, args))
            print(f"run {index + 1}/{args.runs}: {runs[-1]['version']} done", file=sys.stderr)
    return comparison(merged(ours), merged(theirs))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cpu", description=__doc__)
    parser.add_argument("--rounds", type=int, default=5, help="rounds per run (5)")
    parser.add_argument(
        "--blocks", type=int, default=6, help=f"blocks of {BLOCK} per case per round (6)"
    )
    parser.add_argument("--json", action="store_true", help="one JSON line (what --compare reads)")
    parser.add_argument(
        "--compare",
        metavar="PYTHON_OR_CHECKOUT",
        help="another install's interpreter, or another checkout (its package, this Python)",
    )
    parser.add_argument("--runs", type=int, default=2, help="whole runs per side with --compare")
    args = parser.parse_args(argv)
    try:
        scratch.server_url()
    except scratch.PostgresMissing as missing:
        print(f"bench.cpu: PostgreSQL is required ({missing}).", file=sys.stderr)
        return 2
    if args.compare:
        print(compare(args))
        return 0
    run = measure(args.rounds, args.blocks)
    print(json.dumps(run) if args.json else table(run))
    return 0


if __name__ == "__main__":
    sys.exit(main())
