"""Watching PostgreSQL from the side while requests race: who holds a key, who waits on a lock.

Used by the race tests of both protocols. Everything here reads ``pg_locks`` and
``pg_stat_activity`` of the test database; nothing changes what it watches.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
from django.db import connection, connections
from django.test import Client

from idempotency_django._storage.store.sql import Target

ROOT = Path(__file__).resolve().parent.parent
PATH = "/protocols/charges/"  # tests.testapp.lock_views.by_headers


def lock_id(key: str, tenant: str = "") -> int:
    return Target("default", tenant, key, "", timedelta(0), timedelta(0)).lock_id


_HOLDER = (
    "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 "
    "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
    "AND ((classid::bigint << 32) | objid::bigint) = %s::bigint"
)


def advisory_holder(target: Target) -> int | None:
    """The backend holding ``target``'s advisory lock (a "lock" claim in flight), if any."""
    with connection.cursor() as cursor:
        cursor.execute(_HOLDER, [target.lock_id])
        row = cursor.fetchone()
    return None if row is None else int(row[0])


def dsn() -> str:
    """The test database, for connections of our own (watchers, subprocesses).

    Connect with ``prepare_threshold=None``: behind PgBouncer 1.18 in transaction mode
    (the pooler tier) a prepared statement does not follow the client to the next server.
    """
    db = connection.settings_dict
    user = db.get("USER") or "postgres"
    return (
        f"postgres://{user}@{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}/{db['NAME']}"
    )


def query(sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """``sql`` on this thread's watching connection, in autocommit.

    One connection per thread and test (``close_watchers``, after each test), not one per
    call: the waits poll every 10 ms, and each new connection costs the server a fork and
    about 7 ms of CPU.
    """
    return _watcher().execute(sql, params).fetchall()


_local = threading.local()
_opened: list[psycopg.Connection[Any]] = []
_opened_lock = threading.Lock()


def _watcher() -> psycopg.Connection[Any]:
    mine: dict[str, psycopg.Connection[Any]] = _local.__dict__.setdefault("connections", {})
    address = dsn()
    conn = mine.get(address)
    if conn is None or conn.closed or conn.broken:
        conn = mine[address] = psycopg.connect(address, autocommit=True, prepare_threshold=None)
        with _opened_lock:
            _opened.append(conn)
    return conn


def close_watchers() -> None:
    """Close every thread's watching connection (the test database is dropped at the end)."""
    with _opened_lock:
        for conn in _opened:
            conn.close()
        _opened.clear()


def writer_of_charges() -> int | None:
    """A backend (not ours) in a transaction that has written to the charges table."""
    rows = query(
        "SELECT l.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
        "WHERE l.relation = 'testapp_charge'::regclass AND l.mode = 'RowExclusiveLock' "
        "AND a.datname = current_database() AND a.xact_start IS NOT NULL "
        "AND l.pid <> pg_backend_pid()"
    )
    return int(rows[0][0]) if rows else None


def backend_alive(pid: int) -> bool:
    return bool(query("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)))


def wait_for(predicate: Any, within: float = 20, what: str = "condition") -> Any:
    deadline = time.monotonic() + within
    while not (found := predicate()):
        assert time.monotonic() < deadline, f"no {what} within {within}s"
        time.sleep(0.01)
    return found


class LockWatch:
    """Polls ``pg_stat_activity`` in its own thread: every backend seen waiting on a lock.

    ``wait_event_type = 'Lock'`` is a heavyweight lock wait: a row, a transaction
    id (an INSERT queueing on a uniqueness check), or an advisory lock.
    """

    def __init__(self) -> None:
        self.waiting: list[tuple[Any, ...]] = []
        self.polls = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._dsn = dsn()

    def __enter__(self) -> LockWatch:
        self._ready = threading.Event()
        self._thread.start()
        assert self._ready.wait(10), "the lock watcher never connected"
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        with psycopg.connect(self._dsn, autocommit=True, prepare_threshold=None) as conn:
            self._ready.set()
            while not self._stop.is_set():
                self.waiting += conn.execute(
                    "SELECT pid, wait_event, left(query, 200) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND wait_event_type = 'Lock'"
                ).fetchall()
                self.polls += 1
                time.sleep(0.002)


def send(
    key: str,
    body: dict[str, Any] | None = None,
    protocol: str = "lock",
    wait: float = 0,
    lease: float | None = None,
    work: float | None = None,
) -> Any:
    """POST ``body`` to the variant view under ``protocol``, ``wait`` and ``lease``."""
    headers = {"Idempotency-Key": key, "X-Protocol": protocol, "X-Wait": str(wait)}
    if lease is not None:
        headers["X-Lease"] = str(lease)
    if work is not None:
        headers["X-Work"] = str(work)
    payload = json.dumps(body if body is not None else {"amount": 100})
    client = Client(raise_request_exception=False)
    return client.post(PATH, payload, content_type="application/json", headers=headers)


@dataclass
class Timed:
    response: Any
    seconds: float


def timed_send(key: str, body: dict[str, Any] | None = None, **options: Any) -> Timed:
    started = time.monotonic()
    response = send(key, body, **options)
    return Timed(response, time.monotonic() - started)


@dataclass
class Background:
    """One request in a thread of its own (its own connection, as another worker's)."""

    key: str
    body: dict[str, Any]
    options: dict[str, Any] = field(default_factory=dict)
    result: Timed | None = None
    error: BaseException | None = None
    finished_at: float = 0.0

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.result = timed_send(self.key, self.body, **self.options)
        except BaseException as exc:  # reported by join()
            self.error = exc
        finally:
            self.finished_at = time.monotonic()
            connections.close_all()

    @property
    def alive(self) -> bool:
        return self.thread.is_alive()

    def join(self, within: float = 60) -> Any:
        self.thread.join(within)
        assert not self.thread.is_alive(), f"request {self.key} still running after {within}s"
        assert self.error is None, self.error
        assert self.result is not None
        return self.result.response


_WORKER = """
import os
import sys
import django
django.setup()
from django.test import Client
from idempotency_django._storage.store import readonly
readonly.ENABLED = os.environ.get("IDEMPOTENCY_TEST_CLAIM", "read-only") == "read-only"
key, protocol, lease, work, body = sys.argv[1:6]
headers = {"Idempotency-Key": key, "X-Protocol": protocol, "X-Work": work}
if lease:
    headers["X-Lease"] = lease
Client(raise_request_exception=False).post(
    "/protocols/charges/", body, content_type="application/json", headers=headers
)
"""


class Worker:
    """A process running one request through Django's handler, to be SIGKILLed mid-view."""

    def __init__(
        self,
        key: str,
        body: dict[str, Any],
        protocol: str,
        lease: float | None = None,
        work: float = 0,
    ) -> None:
        env = dict(os.environ, DJANGO_SETTINGS_MODULE="tests.settings", DATABASE_URL=dsn())
        lease_text = "" if lease is None else str(lease)
        args = [key, protocol, lease_text, str(work), json.dumps(body)]
        self.process = subprocess.Popen(
            [sys.executable, "-c", _WORKER, *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def wait_mid_view(self, within: float = 60) -> int:
        """The backend of this worker once its charge is written (not committed)."""

        def writing() -> int | None:
            assert self.process.poll() is None, self._stderr()
            return writer_of_charges()

        return int(wait_for(writing, within, "worker mid-view"))

    def kill(self) -> None:
        """SIGKILL: no rollback, no release, no goodbye to PostgreSQL."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def _stderr(self) -> str:
        assert self.process.stderr is not None
        return self.process.stderr.read().decode("utf-8", "replace")[-3000:]
