"""The same views over HTTP: gunicorn with several workers on 127.0.0.1, a loopback client.

Each request opens its own connection (gunicorn's sync workers close it after
the response), so both sides of every comparison pay the same TCP set-up.
"""

from __future__ import annotations

import http.client
import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.holding import Holder
from bench.inprocess import BODY, PROTOCOLS
from bench.measure import Sample, Series, sweep
from tests.system.harness import Gunicorn

ROOT = Path(__file__).resolve().parent.parent
APP = "bench.wsgi:application"
STORM = 64


@dataclass(frozen=True)
class Answer:
    status: int
    replayed: bool


@contextmanager
def served(workers: int, env: dict[str, str]) -> Iterator[Client]:
    """``gunicorn bench.wsgi`` on a free port of 127.0.0.1 (the system tier's runner), a client."""
    server = Gunicorn(
        APP,
        env,
        ready=("/ping/", 204),
        workers=workers,
        options=("--timeout=300",),
        backlog=256,
        ready_within=60,
    )
    with server:
        yield Client(server.port)


class Client:
    """One connection per request; reads only the status and the replay header."""

    def __init__(self, port: int) -> None:
        self.port = port

    def request(
        self, method: str, path: str, key: str | None, release: str = "/nonexistent"
    ) -> Answer:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        try:
            headers = {"Content-Type": "application/json", "X-Bench-Release": release}
            if key is not None:
                headers["Idempotency-Key"] = key
            conn.request(method, path, body=BODY if method == "POST" else None, headers=headers)
            response = conn.getresponse()
            response.read()
            return Answer(response.status, response.getheader("Idempotent-Replayed") == "true")
        finally:
            conn.close()

    def post(self, path: str, key: str) -> Answer:
        return self.request("POST", path, key)


class Sequential:
    """One request at a time: latency of each path, next to the unprotected reference."""

    def __init__(self, client: Client, with_redis: bool) -> None:
        self.client = client
        self.completed = {protocol: self._first(f"/{protocol}/") for protocol in PROTOCOLS}
        paths = ("/cached/",) if with_redis else ()
        self.cached = {path: self._first(path) for path in paths}
        self.holders = {
            protocol: Holder(f"/held/{protocol}/", self._held) for protocol in PROTOCOLS
        }

    def _first(self, path: str) -> str:
        key = str(uuid.uuid4())
        _check(self.client.post(path, key), 201, replayed=False)
        return key

    def _held(self, path: str, key: str, release: str) -> int:
        return self.client.request("POST", path, key, release).status

    def _timed(self, path: str, key: str, status: int = 201, replayed: bool = False) -> float:
        started = time.perf_counter()
        answer = self.client.post(path, key)
        elapsed = time.perf_counter() - started
        _check(answer, status, replayed)
        return elapsed

    def first(self, path: str) -> Sample:
        return lambda: self._timed(path, str(uuid.uuid4()))

    def protected(self, protocol: str) -> Sample:
        def sample() -> float:
            key = str(uuid.uuid4())
            elapsed = self._timed(f"/{protocol}/", key)
            self.completed[protocol] = key
            return elapsed

        return sample

    def replay_pg(self, protocol: str) -> Sample:
        return lambda: self._timed(f"/{protocol}/", self.completed[protocol], replayed=True)

    def replay_redis(self, path: str) -> Sample:
        return lambda: self._timed(path, self.cached[path], replayed=True)

    def conflict(self, protocol: str) -> Sample:
        holder = self.holders[protocol]
        return lambda: self._timed(f"/held/{protocol}/", holder.key(), status=409)

    def close(self) -> None:
        for holder in self.holders.values():
            holder.stop()


def _check(answer: Answer, status: int, replayed: bool) -> None:
    if answer.status != status or answer.replayed != replayed:
        raise RuntimeError(f"unexpected answer over HTTP: {answer}")


def sequential(
    client: Client, with_redis: bool, rounds: int, per_round: int, others: dict[str, Sample]
) -> dict[str, Series]:
    """The HTTP cases, interleaved with ``others`` (the floor) so that ratios share rounds."""
    cases = Sequential(client, with_redis)
    samples: dict[str, Sample] = {
        "http_unprotected": cases.first("/unprotected/"),
        **{f"http_{p}": cases.protected(p) for p in PROTOCOLS},
        **{f"http_replay_pg_{p}": cases.replay_pg(p) for p in PROTOCOLS},
        **{f"http_conflict_{p}": cases.conflict(p) for p in PROTOCOLS},
        **others,
    }
    if with_redis:
        samples["http_lock_cached"] = cases.first("/cached/")
        samples["http_replay_redis"] = cases.replay_redis("/cached/")
    try:
        return sweep(samples, rounds, per_round, warmup=10)
    finally:
        cases.close()


def storm(client: Client, path: str, keys: list[str]) -> tuple[float, list[Answer]]:
    """All requests released at once; seconds until the last one has its answer."""
    answers: list[Answer | None] = [None] * len(keys)
    finished = [0.0] * len(keys)
    go = threading.Event()

    def send(index: int) -> None:
        go.wait()
        try:
            answers[index] = client.post(path, keys[index])
        except OSError:
            answers[index] = Answer(0, False)
        finished[index] = time.perf_counter()

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(keys))]
    for thread in threads:
        thread.start()
    time.sleep(0.05)  # every thread waiting on the event
    started = time.perf_counter()
    go.set()
    for thread in threads:
        thread.join(120)
    return max(finished) - started, [a or Answer(0, False) for a in answers]


def statuses(answers: list[Answer]) -> dict[str, int]:
    """``{"201": n, "201 replayed": n, "409": n, …}``."""
    return dict(
        Counter(f"{a.status}{' replayed' if a.replayed else ''}" for a in answers).most_common()
    )


def environment(url: str, database: str) -> dict[str, str]:
    """What gunicorn's workers need to load ``bench.settings`` on the scratch database."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return {
        **os.environ,
        "DATABASE_URL": url,
        "BENCH_DATABASE": database,
        "DJANGO_SETTINGS_MODULE": "bench.settings",
        "PYTHONPATH": path,
    }


@dataclass
class Storms:
    """Per kind of storm: seconds until all answered (by round), answers, executions."""

    series: dict[str, Series]
    answers: dict[str, dict[str, int]]
    executions: list[int]


def storms(client: Client, with_redis: bool, rounds: int) -> Storms:
    """64 concurrent requests: one new key, 64 distinct unprotected, retries of a done key."""
    from tests.testapp.models import Charge

    done = _completed(client, "/lock/")
    cached = _completed(client, "/cached/") if with_redis else ""
    kinds: dict[str, tuple[str, Callable[[], list[str]]]] = {
        "storm_lock": ("/lock/", lambda: [str(uuid.uuid4())] * STORM),
        "storm_lease": ("/lease/", lambda: [str(uuid.uuid4())] * STORM),
        "storm_unprotected": ("/unprotected/", lambda: [str(uuid.uuid4()) for _ in range(STORM)]),
        "storm_retry_pg": ("/lock/", lambda: [done] * STORM),
    }
    if with_redis:
        kinds["storm_retry_redis"] = ("/cached/", lambda: [cached] * STORM)
    result = Storms({kind: Series() for kind in kinds}, {}, [])
    for _ in range(rounds):
        for kind, (path, make_keys) in kinds.items():
            keys = make_keys()
            elapsed, answers = storm(client, path, keys)
            result.series[kind].rounds.append([elapsed])
            for status, count in statuses(answers).items():
                result.answers.setdefault(kind, {}).setdefault(status, 0)
                result.answers[kind][status] += count
            if kind in ("storm_lock", "storm_lease"):
                result.executions.append(Charge.objects.filter(reference=keys[0]).count())
    return result


def _completed(client: Client, path: str) -> str:
    key = str(uuid.uuid4())
    _check(client.post(path, key), 201, replayed=False)
    return key
