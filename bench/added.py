"""``python -m bench.added``: what protection adds to a first execution, over what users have.

Every case runs interleaved with the others, round after round, in one process
(Django's test client, no middleware), so that load from elsewhere hits them
alike. The headline is the median added time of a protected request over the
view users had before protecting it: a plain view in **autocommit** (its write
one round trip), in milliseconds and over the **floor**: psycopg alone sending
``INSERT … ON CONFLICT DO NOTHING`` and ``UPDATE`` on a UNIQUE(tenant, key)
table in autocommit, bound client-side (as Django sends SQL), measured in the
same rounds. The comparison with a view already inside ``atomic()`` follows as
a secondary line. Each figure is the median over rounds of each round's median;
the range of the round medians shows the noise, and the load average before
and after says how busy the machine was.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python -m bench.added --rounds 5 --requests 200
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from collections.abc import Callable

import psycopg

from bench import scratch
from bench.measure import Sample, Series, sweep, timed
from tests.system.harness import with_database

BODY = json.dumps({"amount": 100})
_FLOOR_TABLE = """CREATE TABLE IF NOT EXISTS bench_added_floor (
    id bigserial PRIMARY KEY, tenant varchar(255) NOT NULL, key varchar(255) NOT NULL,
    answer integer, UNIQUE (tenant, key))"""
_CLAIM = "INSERT INTO bench_added_floor (tenant, key) VALUES (%s, %s) ON CONFLICT DO NOTHING"
_RECORD = "UPDATE bench_added_floor SET answer = 201 WHERE tenant = %s AND key = %s"


def _floor(conn: psycopg.Connection[tuple[object, ...]], client_side: bool) -> Sample:
    cursor = psycopg.ClientCursor(conn) if client_side else conn.cursor()

    def sample() -> float:
        params = ("bench", str(uuid.uuid4()))

        def work() -> None:
            cursor.execute(_CLAIM, params)
            cursor.execute(_RECORD, params)

        return timed(work)

    return sample


def _post(
    path: str, key: str | None = None, replayed: bool = False, token: str = "", marked: bool = False
) -> Sample:
    from django.test import Client

    client = Client()
    auth = {"Authorization": f"Token {token}"} if token else {}
    if marked:  # a retry as idempotency_django.client sends it
        auth["Idempotency-Retry"] = "1"

    def sample() -> float:
        k = key or str(uuid.uuid4())
        started = time.perf_counter()
        response = client.post(
            path, BODY, content_type="application/json", headers={"Idempotency-Key": k, **auth}
        )
        elapsed = time.perf_counter() - started
        assert response.status_code == 201, (path, response.status_code, response.content)
        assert (response.get("Idempotent-Replayed") == "true") == replayed, path
        return elapsed

    return sample


def _ping() -> Sample:
    """A request that reaches a view and touches no database: Django's own share."""
    from django.test import Client

    client = Client()

    def sample() -> float:
        started = time.perf_counter()
        assert client.get("/ping/").status_code == 204
        return time.perf_counter() - started

    return sample


def _with(setup: Callable[[], Callable[[], None]], sample: Sample) -> Sample:
    """``sample`` with a switch flipped around it (``setup`` returns the undo)."""

    def wrapped() -> float:
        undo = setup()
        try:
            return sample()
        finally:
            undo()

    return wrapped


def _both(
    first: Callable[[], Callable[[], None]], second: Callable[[], Callable[[], None]]
) -> Callable[[], Callable[[], None]]:
    def setup() -> Callable[[], None]:
        undo_first, undo_second = first(), second()

        def undo() -> None:
            undo_second()
            undo_first()

        return undo

    return setup


def _inserting_claim() -> Callable[[], None]:
    from idempotency_django._storage.store import readonly

    readonly.ENABLED = False
    return lambda: setattr(readonly, "ENABLED", True)


def _prepared(on: bool) -> Callable[[], Callable[[], None]]:
    def setup() -> Callable[[], None]:
        from django.conf import settings

        # Read per request (not compiled): no setting_changed, so nothing else recompiles.
        before = getattr(settings, "IDEMPOTENCY_PREPARED_STATEMENTS", None)
        settings.IDEMPOTENCY_PREPARED_STATEMENTS = on

        def undo() -> None:
            settings.IDEMPOTENCY_PREPARED_STATEMENTS = before

        return undo

    return setup


def cases(url: str, conns: list[psycopg.Connection[tuple[object, ...]]]) -> dict[str, Sample]:
    from django.test import Client

    replay_key = str(uuid.uuid4())
    assert (
        Client()
        .post(
            "/lock/", BODY, content_type="application/json", headers={"Idempotency-Key": replay_key}
        )
        .status_code
        == 201
    )
    floor_conn = psycopg.connect(url, autocommit=True)
    floor_conn.execute(_FLOOR_TABLE.encode())
    conns.append(floor_conn)
    found: dict[str, Sample] = {
        "floor": _floor(floor_conn, client_side=True),
        "floor_prepared": _floor(floor_conn, client_side=False),
        "plain": _post("/unprotected/"),
        "autocommit": _post("/autocommit/"),
        "ping": _ping(),
        "lock": _with(_prepared(True), _post("/lock/")),
        "lock_unprepared": _with(_prepared(False), _post("/lock/")),
        "lock_inserting": _with(_inserting_claim, _post("/lock/")),
        "lease": _post("/lease/"),
        "replay": _with(_prepared(True), _post("/lock/", replay_key, replayed=True)),
        "replay_marked": _with(_prepared(True), _post("/lock/", replay_key, True, marked=True)),
        "replay_020": _with(
            _both(_inserting_claim, _prepared(False)), _post("/lock/", replay_key, replayed=True)
        ),
        "drf_plain": _post("/drf/plain/"),
        "drf_lock": _post("/drf/lock/"),
    }
    token = _token()
    found["drf_token_plain"] = _post("/drf/token/plain/", token=token)
    found["drf_token_lock"] = _post("/drf/token/lock/", token=token)
    from bench.inprocess import redis_available
    from bench.settings import PEER

    if PEER:
        found["drf_token_peer"] = _post("/drf/token/peer/", token=token)
        if redis_available():
            found["drf_token_peer_shared"] = _post("/drf/token/peer-shared/", token=token)
    if redis_available():
        found["cached"] = _post("/cached/")
    return found


def _token() -> str:
    """A DRF token for a user of its own: the token-authenticated cases' caller."""
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    user = get_user_model().objects.create(username=f"bench-{uuid.uuid4()}")
    return str(Token.objects.create(user=user).key)


def _added(series: dict[str, Series], case: str, over: str) -> Series:
    """``case`` minus ``over``, round by round (interleaved: the same load hit both)."""
    return Series(
        [[x - y] for x, y in zip(series[case].medians(), series[over].medians(), strict=True)]
    )


# The headline: over what users have, a plain view in autocommit (one round trip for its
# write), and that over the floor. Then the same over a view already inside atomic().
HEADLINE = (
    ("first execution, prepared statements", "lock", "autocommit"),
    ("first execution, no prepared statements", "lock_unprepared", "autocommit"),
    ("first execution, inserting claim", "lock_inserting", "autocommit"),
    ("first execution, lease", "lease", "autocommit"),
    ("DRF mixin over plain DRF view", "drf_lock", "drf_plain"),
    ("DRF mixin, token-authenticated", "drf_token_lock", "drf_token_plain"),
    ("replay, over an empty request", "replay", "ping"),
    ("replay, marked retry, over an empty request", "replay_marked", "ping"),
    ("replay, 0.2.0's claim, over an empty request", "replay_020", "ping"),
)
SECONDARY = (
    ("first execution over a view in atomic()", "lock", "plain"),
    ("no prepared statements, over atomic()", "lock_unprepared", "plain"),
)


def report(series: dict[str, Series], load: tuple[str, str] = ("?", "?")) -> str:
    floor = series["floor"].median
    rows = [(name, _added(series, case, over)) for name, case, over in HEADLINE]
    if "drf_token_peer" in series:
        peer = _added(series, "drf_token_peer", "drf_token_plain")
        rows.append(("peer, token DRF, in process memory", peer))
    if "drf_token_peer_shared" in series:
        peer = _added(series, "drf_token_peer_shared", "drf_token_plain")
        rows.append(("peer, token DRF, Redis storage and lock", peer))
    if "cached" in series:
        rows.append(("cache on, first execution, over lock", _added(series, "cached", "lock")))
    first = _added(series, "lock", "autocommit").median
    lines = [
        f"load (1/5/15 min) before: {load[0]}, after: {load[1]} (shared machine: read the ranges)",
        f"floor (psycopg alone, client-side bound, autocommit): {floor * 1e3:.3f} ms "
        f"(range {series['floor'].spread[0] * 1e3:.3f}..{series['floor'].spread[1] * 1e3:.3f}); "
        f"prepared: {series['floor_prepared'].median * 1e3:.3f} ms",
        f"plain view (autocommit): {series['autocommit'].median * 1e3:.3f} ms; "
        f"in atomic(): {series['plain'].median * 1e3:.3f} ms; "
        f"plain DRF view: {series['drf_plain'].median * 1e3:.3f} ms",
        f"{'added over what users have':44} {'ms':>7} {'/ floor':>8}  range (ms)",
    ]
    lines += [_row(name, added, floor) for name, added in rows]
    for name, case in (("replay", "replay"), ("marked retry's replay", "replay_marked")):
        ratio = _added(series, case, "ping").median / first
        lines.append(f"{name + ' / first execution':44} {ratio:7.2f}")
    lines.append(f"{'secondary: over a view already in atomic()':44}")
    lines += [_row(name, _added(series, c, o), floor) for name, c, o in SECONDARY]
    return "\n".join(lines)


def _row(name: str, added: Series, floor: float) -> str:
    low, high = added.spread
    return (
        f"{name:44} {added.median * 1e3:7.3f} {added.median / floor:8.2f}  "
        f"{low * 1e3:.3f}..{high * 1e3:.3f}"
    )


def _load() -> str:
    return "/".join(f"{v:.2f}" for v in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.added", description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=200, help="samples per case per round")
    args = parser.parse_args(argv)
    url = scratch.server_url()
    with scratch.databases(url, [scratch.MAIN]):
        os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
        os.environ["BENCH_DATABASE"] = scratch.MAIN
        import django
        from django.core.management import call_command
        from django.db import connections

        django.setup()
        call_command("migrate", verbosity=0)
        conns: list[psycopg.Connection[tuple[object, ...]]] = []
        db_url = with_database(url, scratch.MAIN)
        before = _load()
        try:
            series = sweep(cases(db_url, conns), args.rounds, args.requests)
        finally:
            for conn in conns:
                conn.close()
            connections.close_all()
    print(f"bench.added: {args.rounds} interleaved rounds x {args.requests} samples per case")
    print(report(series, (before, _load())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
