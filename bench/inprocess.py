"""Both protocols through Django's test client, interleaved with the floor.

Besides whole requests, it replays the exact SQL text an unprotected and each
protected first execution sent (captured, then re-keyed) through psycopg alone:
the difference is what the protocol's statements cost the database and the
driver, and the rest of the added latency is Python.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import psycopg
from django.core.cache import caches
from django.db import connections
from django.http import HttpResponseBase
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django_redis.exceptions import ConnectionInterrupted
from redis.exceptions import RedisError

from bench import micro, outbox, receivers
from bench.floor import floor_samples
from bench.holding import Holder
from bench.measure import Sample, Series, sweep, timed
from bench.settings import OUTBOX

BODY = json.dumps({"amount": 100})
TRANSACTION_CONTROL = frozenset({"BEGIN", "COMMIT", "ROLLBACK"})
PROTOCOLS = ("lock", "lease")


def redis_available() -> bool:
    try:
        caches["replay"].set("bench:ping", 1, timeout=5)
        return bool(caches["replay"].get("bench:ping") == 1)
    except (ConnectionInterrupted, RedisError, OSError):
        return False


class Requests:
    """Requests to the bench views through the test client, each checked for its answer."""

    def __init__(self) -> None:
        self.client = Client()
        self.completed = {protocol: self._first(f"/{protocol}/") for protocol in PROTOCOLS}
        self.holders = {protocol: _holder(f"/held/{protocol}/") for protocol in PROTOCOLS}
        self.cached: dict[str, list[str]] = {}
        self.receivers = receivers.available()

    def post(self, path: str, key: str, **headers: str) -> HttpResponseBase:
        return self.client.post(
            path, BODY, content_type="application/json", headers={"Idempotency-Key": key, **headers}
        )

    def _first(self, path: str) -> str:
        key = str(uuid.uuid4())
        _expect(self.post(path, key), 201, replayed=False)
        return key

    def first(self, path: str) -> Sample:
        return lambda: timed(lambda: _expect(self.post(path, str(uuid.uuid4())), 201, False))

    def protected(self, protocol: str) -> Sample:
        def sample() -> float:
            key = str(uuid.uuid4())
            elapsed = timed(lambda: _expect(self.post(f"/{protocol}/", key), 201, False))
            self.completed[protocol] = key
            return elapsed

        return sample

    def replay_pg(self, protocol: str) -> Sample:
        path = f"/{protocol}/"
        return lambda: timed(lambda: _expect(self.post(path, self.completed[protocol]), 201, True))

    def conflict(self, protocol: str) -> Sample:
        holder, path = self.holders[protocol], f"/held/{protocol}/"

        def sample() -> float:
            key = holder.key()
            return timed(lambda: _expect(self.post(path, key, **_RELEASE), 409, False))

        return sample

    def replay_redis(self, path: str) -> Sample:
        keys = self.cached[path] = [self._first(path) for _ in range(20)]

        def sample() -> float:
            keys.append(key := keys.pop(0))
            return timed(lambda: _expect(self.post(path, key), 201, replayed=True))

        return sample

    def observed(self) -> float:
        self.receivers.connect()
        try:
            with self.receivers.around():
                return self.protected("lock")()
        finally:
            self.receivers.disconnect()

    def close(self) -> None:
        for holder in self.holders.values():
            holder.stop()


_RELEASE = {"X-Bench-Release": "/nonexistent"}  # a 409 never reaches the view


def _holder(path: str) -> Holder:
    def post(path: str, key: str, release: str) -> int:
        response = Client().post(
            path,
            BODY,
            content_type="application/json",
            headers={"Idempotency-Key": key, "X-Bench-Release": release},
        )
        return response.status_code

    return Holder(path, post, after=connections.close_all)


def _expect(response: HttpResponseBase, status: int, replayed: bool) -> None:
    if response.status_code != status or response.has_header("Idempotent-Replayed") != replayed:
        raise RuntimeError(f"unexpected answer {response.status_code} from the test client")


def statements(work: Callable[[], object], alias: str = "default") -> list[str]:
    """The SQL text ``work`` sent on ``alias``, transaction control included."""
    with CaptureQueriesContext(connections[alias]) as captured:
        work()
    return [query["sql"] for query in captured.captured_queries]


def count_sql(sent: list[str]) -> int:
    """The SQL statements: Django's own BEGIN/COMMIT logs, and a BEGIN or COMMIT sent in a
    pipeline beside a prepared statement (``store.carry``), are transaction control."""
    return sum(1 for sql in sent if _control(sql.strip().upper()) is False)


def _control(sql: str) -> bool:
    return sql in TRANSACTION_CONTROL or (
        sql.startswith("BEGIN ISOLATION LEVEL") and ";" not in sql
    )


def round_trips(work: Callable[[], object], alias: str = "default") -> int:
    """The round trips ``work`` made on ``alias``, at the wire: libpq's trace of what the
    client sent, where each ``Query`` (a simple query) or ``Sync`` (a pipeline, a prepared
    statement) message ends one (tests/test_round_trips.py counts them the same way)."""
    conn = connections[alias]
    conn.ensure_connection()
    pgconn = conn.connection.pgconn
    fd, name = tempfile.mkstemp()
    try:
        pgconn.trace(fd)
        pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            work()
        finally:
            pgconn.untrace()
        with open(name) as trace:
            sent = [line for line in trace.read().splitlines() if line.startswith("F\t")]
    finally:
        os.close(fd)
        os.unlink(name)
    return sum(1 for line in sent if "\tQuery\t" in line or "\tSync" in line)


class SqlReplay:
    """Captured statements run again through psycopg, as Django sends them, with a fresh key."""

    def __init__(self, conn: psycopg.Connection[tuple[object, ...]], key: str, sent: list[str]):
        self.cursor = psycopg.ClientCursor(conn)
        self.key = key
        self.sent = sent

    def __call__(self) -> float:
        fresh = str(uuid.uuid4())
        texts = [sql.replace(self.key, fresh) for sql in self.sent]

        def work() -> None:
            for text in texts:
                self.cursor.execute(text)

        return timed(work)


class OwnStatements(SqlReplay):
    """The same replay, timing only the protocol's own statements (not the view's, not BEGIN/COMMIT).

    What the floor times, for the statements the protocol really sends; with
    ``only``, just the statement(s) containing that text.
    """

    def __init__(
        self,
        conn: psycopg.Connection[tuple[object, ...]],
        key: str,
        sent: list[str],
        only: str | None = None,
    ):
        super().__init__(conn, key, sent)
        self.only = only

    def __call__(self) -> float:
        fresh = str(uuid.uuid4())
        spent = 0.0
        for sql in self.sent:
            if self.only is None:
                own = sql.strip().upper() not in TRANSACTION_CONTROL and BUSINESS_TABLE not in sql
            else:
                own = self.only in sql
            started = time.perf_counter()
            self.cursor.execute(sql.replace(self.key, fresh))
            spent += time.perf_counter() - started if own else 0.0
        return spent


BUSINESS_TABLE = '"testapp_charge"'
CLAIM = "pg_try_advisory_xact_lock"
RECORD = 'SET "status"'


def _first(requests: Requests, path: str) -> Callable[[], object]:
    return lambda: requests.post(path, str(uuid.uuid4()))


def capture_first(requests: Requests, path: str) -> tuple[str, list[str]]:
    key = str(uuid.uuid4())
    return key, statements(lambda: requests.post(path, key))


@contextmanager
def sql_samples(url: str, requests: Requests) -> Iterator[dict[str, Sample]]:
    """Samplers replaying each first execution's SQL text through psycopg (client-side bound)."""
    with psycopg.connect(url, autocommit=True, prepare_threshold=None) as conn:
        samples: dict[str, Sample] = {}
        for name, path in (
            ("unprotected", "/unprotected/"),
            ("lock", "/lock/"),
            ("lease", "/lease/"),
        ):
            key, sent = capture_first(requests, path)
            samples[f"sql_{name}"] = SqlReplay(conn, key, sent)
            if name != "unprotected":
                samples[f"own_sql_{name}"] = OwnStatements(conn, key, sent)
            if name == "lock":
                samples["own_claim_lock"] = OwnStatements(conn, key, sent, CLAIM)
                samples["own_record_lock"] = OwnStatements(conn, key, sent, RECORD)
            if name in ("lock", "unprotected"):
                samples[f"commit_{name}"] = OwnStatements(conn, key, sent, "COMMIT")
        yield samples


def counts(requests: Requests) -> dict[str, int]:
    """Statements (round trips apart from BEGIN/COMMIT) per path, from Django's query capture."""
    found: dict[str, int] = {}
    for name, path in (("unprotected", "/unprotected/"), ("autocommit", "/autocommit/")):
        found[f"first_{name}"] = count_sql(capture_first(requests, path)[1])
        found[f"first_{name}_round_trips"] = round_trips(_first(requests, path))
    for protocol in PROTOCOLS:
        path = f"/{protocol}/"
        found[f"first_{protocol}"] = count_sql(capture_first(requests, path)[1])
        found[f"first_{protocol}_round_trips"] = round_trips(_first(requests, path))
        for case in ("replay_pg", "conflict"):
            sample = getattr(requests, case)(protocol)
            found[f"{case}_{protocol}"] = count_sql(statements(sample))
            found[f"{case}_{protocol}_round_trips"] = round_trips(sample)
    found["first_lock_cached"] = count_sql(capture_first(requests, "/cached/")[1])
    replay = requests.replay_redis("/cached/")
    for _ in requests.cached["/cached/"]:
        replay()  # a first execution is not cached: each key's first replay fills the cache
    found["replay_redis"] = count_sql(statements(replay))
    if OUTBOX:
        found["first_enqueue"] = count_sql(capture_first(requests, "/enqueue/")[1])
    return found


def run(
    url: str, rounds: int, per_round: int
) -> tuple[dict[str, Series], dict[str, int], receivers.Receivers]:
    """The in-process sweep; also the statements per path and what the receivers row measured."""
    requests = Requests()
    redis = redis_available()
    try:
        with contextlib.ExitStack() as stack:
            cases: dict[str, Sample] = {
                "unprotected": requests.first("/unprotected/"),
                "autocommit": requests.first("/autocommit/"),
                **{protocol: requests.protected(protocol) for protocol in PROTOCOLS},
                **{f"replay_pg_{p}": requests.replay_pg(p) for p in PROTOCOLS},
                **{f"conflict_{p}": requests.conflict(p) for p in PROTOCOLS},
                "lock_observed": requests.observed,
                **micro.signal_samples(requests.receivers),
                "unprotected_prepared": requests.first("/prepared/unprotected/"),
                "lock_prepared": requests.first("/prepared/lock/"),
                **stack.enter_context(floor_samples(url)),
                **stack.enter_context(sql_samples(url, requests)),
            }
            if OUTBOX:
                stack.enter_context(outbox.broker())
                cases["lock_enqueue"] = requests.first("/enqueue/")
                cases["lock_enqueue_relayed"] = outbox.without_fast_path(
                    requests.first("/enqueue/")
                )
            if redis:
                cases.update(_cache_cases(requests))
            series = sweep(cases, rounds, per_round)
            found = counts(requests)
    finally:
        requests.close()
    return series, found, requests.receivers


def _cache_cases(requests: Requests) -> dict[str, Sample]:
    return {
        **micro.cache_samples("replay"),
        "lock_cached": requests.first("/cached/"),
        "lock_cached_generic": requests.first("/cached-generic/"),
        "replay_redis": requests.replay_redis("/cached/"),
        "replay_redis_generic": requests.replay_redis("/cached-generic/"),
    }
