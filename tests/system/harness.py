"""The system tier's tools, which ``bench`` borrows (``make stress``, ``make bench``'s HTTP cases).

A scratch PostgreSQL database, a WSGI app under gunicorn (the sample project, or
the benchmark's app), a TCP proxy that can cut the database away, a monkey that
kills workers and terminates backends, and an HTTP client. It imports no Django:
it drives the sample from outside, as production traffic and an operator would,
and reads the tables with psycopg. What is done with these tools (storms,
crash scenarios, the judge) is in ``tests.system.chaos``.
"""

from __future__ import annotations

import http.client
import itertools
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Self
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = "tests.system.served_settings"
SAMPLE_APP = "sample_project.wsgi:application"
CHARGES = "/charges/"
SLOW_CHARGES = "/chaos/charges/"
SHORT_LEASE_CHARGES = "/chaos/short-lease/charges/"
ENTRIES_TABLE = "idempotency_django_idempotencyentry"
CHARGES_TABLE = "payments_charge"
RETRYABLE = frozenset({409, 500, 503, 0})
# The gates' advisory locks are the two-int form (objsubid 2) under this class: the package's
# own locks are bigints (objsubid 1), so a gate never meets a claim's lock.
GATE_CLASS = 7648
MONKEY_GATE = 1


# --- the database --------------------------------------------------------------------------


def with_database(url: str, name: str) -> str:
    """``url`` pointing at another database of the same server."""
    return urlunsplit(urlsplit(url)._replace(path="/" + name))


def with_port(url: str, port: int) -> str:
    """``url`` pointing at another port of 127.0.0.1 (the proxy's)."""
    parts = urlsplit(url)
    credentials = parts.netloc.rpartition("@")[0]
    netloc = f"{credentials}@127.0.0.1:{port}" if credentials else f"127.0.0.1:{port}"
    return urlunsplit(parts._replace(netloc=netloc))


class ScratchDatabase:
    """A database of our own on the shared server: created, migrated, dropped by us alone."""

    def __init__(self, server_url: str, name: str) -> None:
        self.name = name
        self.url = with_database(server_url, name)
        self._admin = with_database(server_url, "postgres")
        # The judge's and the waits' one connection, shared by the threads that read (a
        # new connection per poll cost the server a fork and 7 ms of CPU each time).
        self._reader: psycopg.Connection[Any] | None = None
        self._reading = threading.Lock()

    @classmethod
    def tagged(cls, server_url: str, tag: str) -> ScratchDatabase:
        """``idem_sys_<tag>_<pid>``: two runs at once never drop each other's database."""
        return cls(server_url, f"idem_sys_{tag}_{os.getpid()}")

    def create(self, *, migrate: bool = True) -> None:
        """A fresh database; with the sample's tables unless ``migrate`` is false (bench's own)."""
        self._admin_execute("DROP DATABASE IF EXISTS {} WITH (FORCE)")
        self._admin_execute("CREATE DATABASE {}")
        if migrate:
            manage(self.url, "migrate", "--noinput")

    def drop(self) -> None:
        with self._reading:
            if self._reader is not None:
                self._reader.close()
                self._reader = None
        self._admin_execute("DROP DATABASE IF EXISTS {} WITH (FORCE)")

    def _admin_execute(self, statement: str) -> None:
        with psycopg.connect(self._admin, autocommit=True) as conn:
            conn.execute(sql.SQL(statement).format(sql.Identifier(self.name)))

    def rows(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """``query``'s rows, in autocommit: what every other connection has committed."""
        with self._reading:
            if self._reader is None or self._reader.closed or self._reader.broken:
                self._reader = psycopg.connect(
                    self.url, autocommit=True, application_name="idem_sys_judge"
                )
            return self._reader.execute(query, params).fetchall()

    def charges(self, keys: list[str]) -> dict[str, list[int]]:
        """Committed charge ids per key (the clients send their key as the description)."""
        found: dict[str, list[int]] = {key: [] for key in keys}
        query = f"SELECT description, id FROM {CHARGES_TABLE} WHERE description = ANY(%s)"
        for key, charge_id in self.rows(query, (keys,)):
            found[key].append(charge_id)
        return found

    def entries(self, keys: list[str]) -> dict[str, tuple[str, Any]]:
        """``key: (status, locked_until)`` of the entries of these keys."""
        query = f"SELECT key, status, locked_until FROM {ENTRIES_TABLE} WHERE key = ANY(%s)"
        return {key: (status, until) for key, status, until in self.rows(query, (keys,))}

    def backends(self, in_transaction: bool = False) -> list[Backend]:
        """The sample's connections, each named ``idem_sys:<worker pid>[:<key>]``."""
        query = (
            "SELECT pid, application_name, xact_start IS NOT NULL FROM pg_stat_activity "
            "WHERE datname = %s AND application_name LIKE 'idem_sys:%%'"
        )
        found = [Backend.parse(*row) for row in self.rows(query, (self.name,))]
        return [b for b in found if b.in_transaction or not in_transaction]

    def terminate(self, backend: Backend) -> bool:
        (row,) = self.rows("SELECT pg_terminate_backend(%s)", (backend.pid,))
        return bool(row[0])


@dataclass(frozen=True)
class Backend:
    pid: int
    worker: int
    key: str
    in_transaction: bool

    @classmethod
    def parse(cls, pid: int, application_name: str, in_transaction: bool) -> Backend:
        _, worker, key = [*application_name.split(":", 2), ""][:3]
        return cls(pid, int(worker), key, in_transaction)


class Gate:
    """A point inside the served view, after its write and before its commit, where it waits.

    A request sent with ``X-Chaos-Gate: <id>`` takes the gate's advisory lock (shared,
    until its transaction ends) there. While the gate is closed (we hold the lock) the
    request waits, inside its view, mid-transaction, for as long as we like: no timing.
    ``waiter()`` tells when one arrived, from pg_locks: the event a test acts on.
    """

    _ids = itertools.count(MONKEY_GATE + 1)

    def __init__(self, database: ScratchDatabase, gate: int | None = None) -> None:
        self.database = database
        self.id = next(self._ids) if gate is None else gate
        self._conn: psycopg.Connection[Any] | None = None

    def close(self) -> Self:
        """Hold the gate: requests reaching it wait (once any already past it have committed)."""
        if self._conn is None:
            self._conn = psycopg.connect(
                self.database.url, autocommit=True, application_name="idem_sys_gate"
            )
            self._conn.execute("SELECT pg_advisory_lock(%s::int4, %s::int4)", (GATE_CLASS, self.id))
        return self

    def open(self) -> None:
        """Let every waiting request on (a gate opened twice is still open)."""
        if self._conn is not None:
            conn, self._conn = self._conn, None
            conn.close()  # a session lock ends with its session

    def waiters(self) -> list[Backend]:
        """The requests waiting at the gate now."""
        query = (
            "SELECT a.pid, a.application_name, true FROM pg_locks l "
            "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' "
            "AND NOT l.granted AND l.classid::bigint = %s AND l.objid::bigint = %s AND l.objsubid = 2 "
            "AND a.application_name LIKE 'idem_sys:%%'"
        )
        return [Backend.parse(*row) for row in self.database.rows(query, (GATE_CLASS, self.id))]

    def waiter(
        self, key: str | None = None, within: float = 300, stop: threading.Event | None = None
    ) -> Backend | None:
        """The first request (of ``key``) to wait at the gate; None once ``stop`` is set.

        ``within`` only bounds a broken run: the request is on its way, however slow.
        """
        deadline = time.monotonic() + within
        while stop is None or not stop.is_set():
            found = [b for b in self.waiters() if key is None or b.key == key]
            if found:
                return found[0]
            if time.monotonic() > deadline:
                raise AssertionError(f"nobody ({key or 'any key'}) at gate {self.id} in {within}s")
            time.sleep(0.02)  # polling for the event, not waiting for it to happen
        return None


def wait_for_clock(database: ScratchDatabase, moment: Any, within: float = 300) -> None:
    """Until the database's clock has passed ``moment`` (a lease's end: the server's clock)."""
    deadline = time.monotonic() + within
    while not database.rows("SELECT clock_timestamp() > %s", (moment,))[0][0]:
        if time.monotonic() > deadline:
            raise AssertionError(f"the database's clock never passed {moment}")
        time.sleep(0.05)


def sample_env(database_url: str, lease: int, protocol: str | None = None) -> dict[str, str]:
    """The sample's environment under ``served_settings``; its own protocol unless ``protocol``."""
    env = dict(os.environ)
    env.pop("REDIS_URL", None)  # the database is the proof here, not the replay cache
    env.pop("IDEMPOTENCY_PROTOCOL", None)
    env.update(
        DJANGO_SETTINGS_MODULE=SETTINGS,
        DATABASE_URL=database_url,
        IDEMPOTENCY_LEASE=str(lease),
        CONN_MAX_AGE="0",
        DEBUG="0",
        PYTHONUNBUFFERED="1",
    )
    if protocol:
        env["IDEMPOTENCY_PROTOCOL"] = protocol
    return env


def manage(database_url: str, *args: str, lease: int = 60) -> str:
    """Run ``manage.py`` of the sample against ``database_url``; its output."""
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=sample_env(database_url, lease),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


# --- the app server ------------------------------------------------------------------------


class Gunicorn:
    """``app`` under gunicorn, sync workers, on a free loopback port; a context manager.

    Up once ``GET ready[0]`` answers ``ready[1]``. Its output goes to ``log``
    (appended), or to ours when ``log`` is None.
    """

    def __init__(
        self,
        app: str,
        env: Mapping[str, str],
        *,
        ready: tuple[str, int],
        workers: int = 4,
        log: Path | None = None,
        options: Sequence[str] = ("--timeout=120", "--graceful-timeout=5"),
        backlog: int = 1024,
        ready_within: float = 120,
    ) -> None:
        self.app, self.env, self.ready, self.workers, self.log = app, env, ready, workers, log
        self.options, self.backlog, self.ready_within = options, backlog, ready_within
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        # We bind and hand gunicorn the socket: no window for another process to take the port.
        # It keeps our backlog: gunicorn doesn't listen() again on a socket that listens.
        listener = socket.create_server(("127.0.0.1", 0), backlog=self.backlog)
        self.port = listener.getsockname()[1]
        fd = listener.fileno()
        os.set_inheritable(fd, True)
        try:
            self.process = self._spawn(fd)
        finally:
            listener.close()
        self._wait_ready()

    def _spawn(self, fd: int) -> subprocess.Popen[bytes]:
        if self.log is None:
            return self._popen(fd, None)
        with self.log.open("ab") as log:
            return self._popen(fd, log)

    def _popen(self, fd: int, log: IO[bytes] | None) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            self._command(fd),
            cwd=ROOT,
            env=dict(self.env),
            pass_fds=(fd,),
            stdout=log,
            stderr=subprocess.STDOUT if log else None,
        )

    def _command(self, fd: int) -> list[str]:
        return [
            sys.executable,
            "-m",
            "gunicorn",
            self.app,
            f"--bind=fd://{fd}",
            f"--workers={self.workers}",
            "--worker-class=sync",
            *self.options,
            "--log-level=warning",
        ]

    def _wait_ready(self) -> None:
        path, status = self.ready
        deadline = time.monotonic() + self.ready_within
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                raise RuntimeError(f"gunicorn {self.app} exited\n{self.tail()}")
            if request(self.port, "GET", path, timeout=5).status == status:
                return
            time.sleep(0.2)
        raise RuntimeError(f"gunicorn {self.app} not ready in {self.ready_within}s\n{self.tail()}")

    def worker_pids(self) -> set[int]:
        assert self.process is not None
        return children(self.process.pid)

    def kill_worker(self, pid: int) -> bool:
        """SIGKILL one of *our* workers (never any other process); whether it was ours."""
        if pid not in self.worker_pids():
            return False
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        return True

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        workers = self.worker_pids()
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(30)
        for pid in workers & self.worker_pids():
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def tail(self, size: int = 4000) -> str:
        if self.log is None or not self.log.exists():
            return ""
        return self.log.read_bytes()[-size:].decode("utf-8", "replace")


class SampleServer(Gunicorn):
    """The sample project under ``served_settings`` (its slow twin views), on ``database_url``."""

    def __init__(
        self,
        database_url: str,
        log: Path,
        workers: int = 4,
        lease: int = 10,
        protocol: str | None = None,
    ) -> None:
        env = sample_env(database_url, lease, protocol)
        super().__init__(SAMPLE_APP, env, ready=(CHARGES, 405), workers=workers, log=log)
        self.lease = lease


def children(parent: int) -> set[int]:
    """Process ids whose parent is ``parent`` (Linux /proc)."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path("/proc", entry, "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid …": comm may hold spaces and parentheses.
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent:
            found.add(int(entry))
    return found


# --- the TCP proxy between gunicorn and PostgreSQL ------------------------------------------


class TcpProxy:
    """Forwards 127.0.0.1:<port> to PostgreSQL; ``cut()`` drops every connection until ``restore()``.

    Cut, it resets open connections and every new one at once, as a database
    that went away does; nothing hangs, so the answer is prompt.
    """

    def __init__(self, upstream_port: int) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port: int = self._listener.getsockname()[1]
        self._open = threading.Event()
        self._open.set()
        self.refused = 0  # connections turned away while cut: each a request that found no database
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._thread = threading.Thread(
            target=self._accept_loop, name="idem_sys-proxy", daemon=True
        )
        self._thread.start()

    def cut(self) -> None:
        self.refused = 0
        self._open.clear()
        with self._lock:
            for sock in self._sockets:
                _reset(sock)
            self._sockets.clear()

    def restore(self) -> None:
        self._open.set()

    def wait_refused(self, count: int, within: float = 300) -> None:
        """Until ``count`` connections were turned away since the last ``cut()``."""
        deadline = time.monotonic() + within
        while self.refused < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.refused} connections refused in {within}s")
            time.sleep(0.02)

    def close(self) -> None:
        self._closing.set()
        self.cut()
        self._thread.join(5)
        self._listener.close()

    def _accept_loop(self) -> None:
        while not self._closing.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            if not self._open.is_set():
                _reset(client)
                self.refused += 1
                continue
            self._connect(client)

    def _connect(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.upstream, timeout=5)
        except OSError:
            _reset(client)
            return
        upstream.settimeout(None)
        with self._lock:
            self._sockets.update((client, upstream))
        for source, target in ((client, upstream), (upstream, client)):
            threading.Thread(target=self._pump, args=(source, target), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                target.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._sockets.difference_update((source, target))
            _reset(source)
            _reset(target)


def _reset(sock: socket.socket) -> None:
    # shutdown() first: close() alone leaves a socket another thread is blocked on open (Linux),
    # and the peer would wait forever. SO_LINGER 0 then makes the close a RST.
    with suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    with suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with suppress(OSError):
        sock.close()


# --- the monkey --------------------------------------------------------------------------------


class Monkey:
    """SIGKILLs a worker or terminates a backend caught mid-transaction, again and again.

    Every ``interval`` s (pacing only) it closes the monkey's gate, waits for a request to
    arrive there (inside its view, its write done, its commit not), strikes that request,
    and opens the gate again: every strike lands in a request, however slow the machine.
    The storm's slow requests pass the gate (``MONKEY_GATE``). It alternates the two
    strikes and stops after ``budget`` of each (``None``: never).
    """

    def __init__(
        self,
        server: Gunicorn,
        database: ScratchDatabase,
        interval: float,
        budget: int | None = None,
        seed: int = 0,
    ) -> None:
        self.server, self.database, self.interval, self.budget = server, database, interval, budget
        self.rng = random.Random(seed)
        self.killed = 0
        self.terminated = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="idem_sys-monkey", daemon=True)

    def __enter__(self) -> Monkey:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)

    @property
    def done(self) -> bool:
        return self.budget is not None and min(self.killed, self.terminated) >= self.budget

    def _run(self) -> None:
        while not self._stop.wait(self.interval) and not self.done:
            gate = Gate(self.database, MONKEY_GATE).close()
            try:
                victim = gate.waiter(stop=self._stop, within=3600)
                if victim is not None:
                    self._strike(victim)
            finally:
                gate.open()

    def _strike(self, victim: Backend) -> None:
        if self.killed <= self.terminated:
            self.killed += self.server.kill_worker(victim.worker)
        else:
            self.terminated += self.database.terminate(victim)


# --- clients ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """One HTTP answer; ``status`` 0 when none came (refused, reset, or the worker was killed)."""

    status: int
    body: bytes
    headers: dict[str, str]
    sent: float
    received: float
    error: str = ""

    @property
    def replayed(self) -> bool:
        return self.headers.get("idempotent-replayed") == "true"

    @property
    def problem(self) -> bool:
        return self.headers.get("content-type") == "application/problem+json"


def request(
    port: int,
    method: str,
    path: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    timeout: float = 120,
) -> Answer:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    sent = time.time()
    try:
        conn.request(method, path, body, headers or {})
        response = conn.getresponse()
        data = response.read()
        found = {name.lower(): value for name, value in response.getheaders()}
        return Answer(response.status, data, found, sent, time.time())
    except (OSError, http.client.HTTPException) as exc:
        return Answer(0, b"", {}, sent, time.time(), repr(exc))
    finally:
        conn.close()


def charge_body(key: str) -> bytes:
    return json.dumps({"amount": 100, "currency": "eur", "description": key}).encode()


def charge(
    port: int, key: str, path: str = CHARGES, delay: float = 0, gate: int | None = None
) -> Answer:
    """POST a charge with ``key`` as its Idempotency-Key (and description, to find it again).

    On the slow views, it passes ``gate`` (``Gate``) after its write, then works ``delay`` s.
    """
    headers = {"Idempotency-Key": key, "Content-Type": "application/json"}
    if delay:
        headers["X-Chaos-Delay"] = str(delay)
    if gate is not None:
        headers["X-Chaos-Gate"] = str(gate)
    return request(port, "POST", path, charge_body(key), headers)


def new_keys(count: int, prefix: str) -> list[str]:
    return [f"{prefix}-{uuid.uuid4()}" for _ in range(count)]


def retry_until_final(
    port: int,
    key: str,
    patience: float,
    rng: random.Random,
    path: str = CHARGES,
    work: float = 0,
    gate: int | None = None,
) -> list[Answer]:
    """Send until a non-retryable answer, as a client honouring 409/5xx would; every answer."""
    answers = [charge(port, key, path, work, gate)]
    give_up = time.monotonic() + patience
    while answers[-1].status in RETRYABLE and time.monotonic() < give_up:
        time.sleep(rng.uniform(0.05, 0.5))  # a client's back-off, not a synchronisation
        answers.append(charge(port, key, path, work, gate))
    return answers
