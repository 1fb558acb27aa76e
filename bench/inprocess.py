"""First executions and replays through Django's test client, next to the floor.

Besides whole requests, it replays the exact SQL text a protected and an
unprotected request sent (captured, then re-keyed) through psycopg alone: the
difference between the two is what the protocol's statements cost the
database and the driver, and the rest of the added latency is Python.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg
from django.core.cache import caches
from django.db import connections
from django.http import HttpResponseBase
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django_redis.exceptions import ConnectionInterrupted
from redis.exceptions import RedisError

from bench.floor import floor_samples
from bench.measure import Sample, Series, sweep, timed

BODY = json.dumps({"amount": 100})
TRANSACTION_CONTROL = frozenset({"BEGIN", "COMMIT", "ROLLBACK"})
_RELAXED = "set_config('synchronous_commit', 'off', true) IS NOT NULL"


def redis_available() -> bool:
    try:
        caches["replay"].set("bench:ping", 1, timeout=5)
        return bool(caches["replay"].get("bench:ping") == 1)
    except (ConnectionInterrupted, RedisError, OSError):
        return False


class Requests:
    """Requests to the bench views through the test client, each checked for its path."""

    def __init__(self) -> None:
        self.client = Client()
        self.completed = self._first("/protected/")
        self.cached = [self._first("/cached/") for _ in range(20)]

    def post(self, path: str, key: str) -> HttpResponseBase:
        return self.client.post(
            path, BODY, content_type="application/json", headers={"Idempotency-Key": key}
        )

    def _first(self, path: str) -> str:
        key = str(uuid.uuid4())
        _expect(self.post(path, key), replayed=False)
        return key

    def unprotected(self) -> float:
        return timed(lambda: _expect(self.post("/unprotected/", str(uuid.uuid4())), False))

    def protected(self) -> float:
        key = str(uuid.uuid4())
        elapsed = timed(lambda: _expect(self.post("/protected/", key), replayed=False))
        self.completed = key
        return elapsed

    def replay_pg(self) -> float:
        return timed(lambda: _expect(self.post("/protected/", self.completed), replayed=True))

    def unprotected_prepared(self) -> float:
        path = "/prepared/unprotected/"
        return timed(lambda: _expect(self.post(path, str(uuid.uuid4())), replayed=False))

    def protected_prepared(self) -> float:
        path = "/prepared/protected/"
        return timed(lambda: _expect(self.post(path, str(uuid.uuid4())), replayed=False))

    def replay_redis(self) -> float:
        self.cached.append(key := self.cached.pop(0))
        return timed(lambda: _expect(self.post("/cached/", key), replayed=True))


def _expect(response: HttpResponseBase, replayed: bool) -> None:
    if response.status_code != 201 or (response.has_header("Idempotent-Replayed") != replayed):
        raise RuntimeError(f"unexpected answer {response.status_code} from the test client")


def statements(work: Callable[[], object]) -> list[str]:
    """The SQL text ``work`` sent on the default connection, transaction control included."""
    with CaptureQueriesContext(connections["default"]) as captured:
        work()
    return [query["sql"] for query in captured.captured_queries]


def count_sql(sent: list[str]) -> int:
    return sum(1 for sql in sent if sql.strip().upper() not in TRANSACTION_CONTROL)


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


@dataclass(frozen=True)
class FirstExecution:
    """The SQL text one protected and one unprotected first execution sent, with their key."""

    key: str
    protected: list[str]
    unprotected: list[str]

    @classmethod
    def capture(cls, requests: Requests) -> FirstExecution:
        key = str(uuid.uuid4())
        protected = statements(lambda: requests.post("/protected/", key))
        unprotected = statements(lambda: requests.post("/unprotected/", key))
        return cls(key, protected, unprotected)

    def counts(self) -> dict[str, int]:
        return {
            "first_protected": count_sql(self.protected),
            "first_protected_round_trips": len(self.protected),
            "first_unprotected": count_sql(self.unprotected),
        }


@contextmanager
def sql_samples(url: str, first: FirstExecution) -> Iterator[dict[str, Sample]]:
    """Samplers replaying the protected and unprotected paths' SQL text through psycopg.

    Captured on the default alias, which binds client-side (Django's default):
    the text carries its parameters.
    """
    claim = first.protected[0]
    if _RELAXED not in claim:
        raise RuntimeError("the claim statement no longer relaxes its commit: update the bench")
    with psycopg.connect(url, autocommit=True, prepare_threshold=None) as conn:
        yield {
            "sql_protected": SqlReplay(conn, first.key, first.protected),
            "sql_unprotected": SqlReplay(conn, first.key, first.unprotected),
            "claim_relaxed": SqlReplay(conn, first.key, [claim]),
            "claim_durable": SqlReplay(conn, first.key, [claim.replace(_RELAXED, "true")]),
        }


def run(url: str, rounds: int, per_round: int) -> tuple[dict[str, Series], dict[str, int]]:
    """The in-process sweep; also returns the SQL statements each path sent."""
    requests = Requests()
    with_redis = redis_available()
    first = FirstExecution.capture(requests)
    with contextlib.ExitStack() as stack:
        cases: dict[str, Sample] = {
            "unprotected": requests.unprotected,
            "protected": requests.protected,
            "replay_pg": requests.replay_pg,
            "unprotected_prepared": requests.unprotected_prepared,
            "protected_prepared": requests.protected_prepared,
            **stack.enter_context(floor_samples(url)),
            **stack.enter_context(sql_samples(url, first)),
        }
        if with_redis:
            cases["replay_redis"] = requests.replay_redis
        series = sweep(cases, rounds, per_round)
    counts = first.counts()
    counts["replay_pg"] = count_sql(statements(requests.replay_pg))
    if with_redis:
        counts["replay_redis"] = count_sql(statements(requests.replay_redis))
    return series, counts
