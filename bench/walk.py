"""``python -m bench.walk``: the request's walk, how many of the package's modules it crosses.

One protected request (``@idempotent`` on a view returning a small
``JsonResponse``, driven by Django's test client with an ``Idempotency-Key``)
is traced with ``sys.setprofile``, three times:

1. ``first``: the first request (claims, runs the view, records the answer);
2. ``retry, database``: a retry with the replay cache emptied first, answered
   from the entries' database (whose commit fills the cache: checked);
3. ``retry, cache``: a retry answered from the replay cache (locmem, named by
   ``IDEMPOTENCY_CACHE``).

A warm-up round on another key runs first, so that imports and one-time set-up
(the derived secret, the options' caches) are not part of any walk.

What is counted. Every ``call`` event whose frame's module
(``frame.f_globals["__name__"]``) is ``idempotency_django`` or under it; frames
of Django, the standard library and this script are not counted, but tracing
follows them, so package code that Django calls back (a signal receiver, an
``on_commit`` hook) counts. Modules are named from the frames at run time,
never by importing them, so the script is unchanged when the package's
internal modules move. The modules, in order of call events, with consecutive
duplicates collapsed, make the walk's sequence. From it: *modules crossed*
(distinct modules), *transitions* (module changes), *returns* (transitions into
a module already entered earlier in the walk and left since), and the entries
per module (printed ``core`` and a multiplication sign and 4 when the walk
entered ``core`` four times, three of them returns). A dataclass's generated
``__init__`` counts for the module that defines the class (its globals are that
module's); a comprehension or generator expression is a call inside its module,
so collapsing hides it.

Generators. A ``call`` event also fires each time a generator (or coroutine) is
resumed: ``next()`` on it, and the ``__exit__`` of a ``@contextmanager``, which
resumes its generator after the ``yield``. A resume continues a body that has
already been entered once, at a place the caller chose by entering the
``with`` block; counting it as a fresh entry would charge the module for a
``with`` statement's shape, not for the path of calls. So the primary figures
count calls only: a generator's first ``call`` event (its start; Python 3.11+
fires none when the generator object is created) counts, later ones on the same
frame are resumes and are skipped. The frame's identity tells them apart (a
generator keeps one frame for its life), not ``f_lasti``, whose value at a start
differs between Python versions. ``returns +resumes`` gives the count with the
resumes kept; ``--resumes`` makes the sequence and entries include them too.

Database: SQLite in memory, or ``DATABASE_URL`` when set; either way a test
database (``test_<name>``) is created, migrated and destroyed by Django's test
machinery, never the database the URL names.

    python -m bench.walk [--sequence] [--resumes]
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

PACKAGE = "idempotency_django"
REPLAY_CACHE = "idempotency"
PATH = "/walk/charge/"
BODY = '{"amount": 100}'
TIMES = "\N{MULTIPLICATION SIGN}"
GENERATOR_FLAGS = 0x20 | 0x80 | 0x200  # CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR

urlpatterns: list[Any] = []  # filled once Django is set up (``@idempotent`` reads settings)


@dataclass
class Trace:
    """The package's ``call`` events of one request: (module, whether a generator resumed)."""

    events: list[tuple[str, bool]] = field(default_factory=list)
    _started: set[int] = field(default_factory=set)
    _frames: list[FrameType] = field(default_factory=list)  # alive, so ids aren't reused

    def __call__(self, frame: FrameType, event: str, arg: object) -> None:
        if event != "call":
            return
        name = frame.f_globals.get("__name__", "")
        if not isinstance(name, str) or not (name == PACKAGE or name.startswith(PACKAGE + ".")):
            return
        resumed = False
        if frame.f_code.co_flags & GENERATOR_FLAGS:
            if id(frame) in self._started:
                resumed = True
            else:
                self._started.add(id(frame))
                self._frames.append(frame)
        self.events.append((name, resumed))

    def sequence(self, resumes: bool) -> list[str]:
        """Modules in order of call events, consecutive duplicates collapsed."""
        walk: list[str] = []
        for name, resumed in self.events:
            if resumed and not resumes:
                continue
            short = name.removeprefix(PACKAGE + ".") if name != PACKAGE else "__init__"
            if not walk or walk[-1] != short:
                walk.append(short)
        return walk


@dataclass
class Walk:
    name: str
    status: int
    replayed: bool
    queries: int
    trace: Trace

    def returns(self, resumes: bool) -> int:
        seen: set[str] = set()
        count = 0
        for module in self.trace.sequence(resumes):
            # Collapsed: a module seen before was left since, so entering it is a return.
            count += module in seen
            seen.add(module)
        return count

    def entries(self, resumes: bool) -> Counter[str]:
        return Counter(self.trace.sequence(resumes))


def configure() -> None:
    import django
    from django.conf import settings

    url = os.environ.get("DATABASE_URL", "")
    if url:
        import dj_database_url

        database: dict[str, Any] = dict(dj_database_url.parse(url, conn_max_age=0))
    else:
        database = {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}
    settings.configure(
        SECRET_KEY="bench-only-not-secret",
        DEBUG=False,
        USE_TZ=True,
        TIME_ZONE="UTC",
        ALLOWED_HOSTS=["*"],
        ROOT_URLCONF=__name__,
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        INSTALLED_APPS=[
            "django.contrib.auth",
            "django.contrib.contenttypes",
            "idempotency_django",
        ],
        MIDDLEWARE=[],
        DATABASES={"default": database},
        CACHES={
            "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
            REPLAY_CACHE: {
                "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                "LOCATION": "bench-walk-replay",
            },
        },
        IDEMPOTENCY_CACHE=REPLAY_CACHE,
        LOGGING={
            "version": 1,
            "disable_existing_loggers": False,
            "handlers": {"null": {"class": "logging.NullHandler"}},
            "loggers": {"django.request": {"handlers": ["null"], "propagate": False}},
        },
    )
    django.setup()
    from django.http import HttpRequest, JsonResponse
    from django.urls import path

    from idempotency_django import idempotent

    @idempotent
    def charge(request: HttpRequest) -> JsonResponse:
        return JsonResponse({"id": 1, "amount": 100}, status=201)

    urlpatterns.append(path(PATH.lstrip("/"), charge))


def replay_cache_size() -> int:
    from django.core.cache import caches

    store = getattr(caches[REPLAY_CACHE], "_cache", None)  # LocMemCache's dict
    return len(store) if store is not None else -1


def request(name: str, key: str, traced: bool = True) -> Walk:
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client()
    trace = Trace()
    profile: Callable[[FrameType, str, object], None] | None = trace if traced else None
    with CaptureQueriesContext(connection) as captured:
        sys.setprofile(profile)
        try:
            response = client.post(
                PATH, BODY, content_type="application/json", headers={"Idempotency-Key": key}
            )
        finally:
            sys.setprofile(None)
    replayed = response.get("Idempotent-Replayed") == "true"
    statements = [
        q for q in captured.captured_queries if q["sql"] not in ("BEGIN", "COMMIT", "ROLLBACK")
    ]
    return Walk(name, response.status_code, replayed, len(statements), trace)


def three_walks(key: str, traced: bool = True) -> list[Walk]:
    from django.core.cache import caches

    first = request("first", key, traced)
    caches[REPLAY_CACHE].clear()
    database = request("retry, database", key, traced)
    filled = replay_cache_size()
    cached = request("retry, cache", key, traced)
    for walk, replayed in ((first, False), (database, True), (cached, True)):
        if walk.status != 201 or walk.replayed != replayed:
            raise SystemExit(f"bench.walk: {walk.name}: {walk.status}, replayed={walk.replayed}")
    if filled == 0:
        raise SystemExit("bench.walk: the retry from the database left the replay cache empty")
    return [first, database, cached]


def top(entries: Counter[str], n: int = 5) -> str:
    return ", ".join(f"{module} {TIMES}{count}" for module, count in entries.most_common(n))


def table(walks: Sequence[Walk], resumes: bool) -> str:
    header = (
        "walk",
        "SQL",
        "modules crossed",
        "transitions",
        "returns",
        "returns +resumes",
        "most-entered modules",
    )
    rows = [header]
    for walk in walks:
        sequence = walk.trace.sequence(resumes)
        rows.append(
            (
                walk.name,
                str(walk.queries),
                str(len(set(sequence))),
                str(len(sequence) - 1),
                str(walk.returns(False)),
                str(walk.returns(True)),
                top(walk.entries(resumes)),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    lines = []
    for index, row in enumerate(rows):
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        lines.append(" | ".join([*cells, row[-1]]))
        if index == 0:
            lines.append("-+-".join("-" * width for width in widths) + "-+-" + "-" * 20)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.walk", description=__doc__)
    parser.add_argument("--sequence", action="store_true", help="print each walk's modules")
    parser.add_argument(
        "--resumes",
        action="store_true",
        help="count generator resumes (a @contextmanager's __exit__) as entries too",
    )
    args = parser.parse_args(argv)
    configure()
    import django
    from django.db import connection

    import idempotency_django

    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        three_walks("bench-walk-warm-up", traced=False)
        walks = three_walks("bench-walk-measured")
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
    print(f"package: {idempotency_django.__file__}")
    print(
        f"python {sys.version.split()[0]}, django {django.get_version()}, "
        f"{connection.vendor} ({'DATABASE_URL' if os.environ.get('DATABASE_URL') else 'in memory'})"
    )
    mode = "calls and generator resumes" if args.resumes else "calls only (resumes skipped)"
    print(f"sequence and entries: {mode}; SQL: statements sent, BEGIN/COMMIT apart\n")
    print(table(walks, args.resumes))
    if args.sequence:
        for walk in walks:
            print(f"\n{walk.name}:\n  " + ">".join(walk.trace.sequence(args.resumes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
