"""The reliability proof's machinery, shared by ``tests/system`` (bounded) and ``bench.stress``.

A scratch PostgreSQL database, the sample project under gunicorn, a TCP proxy
that can cut the database away, storms of duplicate clients, a monkey that
kills workers and terminates backends, and one judge of what came back. It
imports no Django: it drives the sample from outside, as production traffic
and an operator would, and reads the tables with psycopg.
"""

from __future__ import annotations

import http.client
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
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = "bench.chaos_settings"
CHARGES = "/charges/"
SLOW_CHARGES = "/chaos/charges/"
SHORT_LEASE_CHARGES = "/chaos/short-lease/charges/"
ENTRIES_TABLE = "idempotency_django_idempotencyentry"
CHARGES_TABLE = "payments_charge"
RETRYABLE = frozenset({409, 500, 503, 0})


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

    def __init__(self, server_url: str, tag: str) -> None:
        self.name = f"idem_sys_{tag}_{os.getpid()}"
        self.url = with_database(server_url, self.name)
        self._admin = with_database(server_url, "postgres")

    def create(self) -> None:
        self._admin_execute("DROP DATABASE IF EXISTS {} WITH (FORCE)")
        self._admin_execute("CREATE DATABASE {}")
        manage(self.url, "migrate", "--noinput")

    def drop(self) -> None:
        self._admin_execute("DROP DATABASE IF EXISTS {} WITH (FORCE)")

    def _admin_execute(self, statement: str) -> None:
        with psycopg.connect(self._admin, autocommit=True) as conn:
            conn.execute(sql.SQL(statement).format(sql.Identifier(self.name)))

    def rows(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.url, autocommit=True, application_name="idem_sys_judge") as conn:
            return conn.execute(query, params).fetchall()

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


def sample_env(database_url: str, lease: int) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("REDIS_URL", None)  # the database is the proof here, not the replay cache
    env.update(
        DJANGO_SETTINGS_MODULE=SETTINGS,
        DATABASE_URL=database_url,
        IDEMPOTENCY_LEASE=str(lease),
        CONN_MAX_AGE="0",
        DEBUG="0",
        PYTHONUNBUFFERED="1",
    )
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
    """The sample project under gunicorn, sync workers, on a free loopback port."""

    def __init__(self, database_url: str, log: Path, workers: int = 4, lease: int = 10) -> None:
        self.database_url, self.log, self.workers, self.lease = database_url, log, workers, lease
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, ready_within: float = 120) -> None:
        # We bind and hand gunicorn the socket: no window for another process to take the port.
        listener = socket.create_server(("127.0.0.1", 0), backlog=1024)
        self.port = listener.getsockname()[1]
        fd = listener.fileno()
        os.set_inheritable(fd, True)
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                self._command(fd),
                cwd=ROOT,
                env=sample_env(self.database_url, self.lease),
                pass_fds=(fd,),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        listener.close()
        self._wait_ready(ready_within)

    def _command(self, fd: int) -> list[str]:
        return [
            sys.executable,
            "-m",
            "gunicorn",
            "sample_project.wsgi:application",
            f"--bind=fd://{fd}",
            f"--workers={self.workers}",
            "--worker-class=sync",
            "--timeout=120",
            "--graceful-timeout=5",
            "--log-level=warning",
        ]

    def _wait_ready(self, within: float) -> None:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                raise RuntimeError(f"gunicorn exited\n{self.tail()}")
            if request(self.port, "GET", CHARGES, timeout=5).status == 405:
                return
            time.sleep(0.2)
        raise RuntimeError(f"gunicorn not ready within {within}s\n{self.tail()}")

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
        if not self.log.exists():
            return ""
        return self.log.read_bytes()[-size:].decode("utf-8", "replace")


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


@contextmanager
def serving(database_url: str, log: Path, workers: int = 4, lease: int = 10) -> Iterator[Gunicorn]:
    server = Gunicorn(database_url, log, workers, lease)
    try:
        server.start()
        yield server
    finally:
        server.stop()


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
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._thread = threading.Thread(
            target=self._accept_loop, name="idem_sys-proxy", daemon=True
        )
        self._thread.start()

    def cut(self) -> None:
        self._open.clear()
        with self._lock:
            for sock in self._sockets:
                _reset(sock)
            self._sockets.clear()

    def restore(self) -> None:
        self._open.set()

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


def charge(port: int, key: str, path: str = CHARGES, delay: float = 0) -> Answer:
    """POST a charge with ``key`` as its Idempotency-Key (and description, to find it again)."""
    headers = {"Idempotency-Key": key, "Content-Type": "application/json"}
    if delay:
        headers["X-Chaos-Delay"] = str(delay)
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
) -> list[Answer]:
    """Send until a non-retryable answer, as a client honouring 409/5xx would; every answer."""
    answers = [charge(port, key, path, work)]
    give_up = time.monotonic() + patience
    while answers[-1].status in RETRYABLE and time.monotonic() < give_up:
        time.sleep(rng.uniform(0.05, 0.5))
        answers.append(charge(port, key, path, work))
    return answers


# --- the storm ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class StormPlan:
    keys: int
    per_key: int = 8
    clients: int = 32
    # Share of clients that, answered, send again after a random delay (a lost answer).
    late_duplicates: float = 0.25
    # How long one client keeps retrying 409/5xx: a few leases, whatever the load.
    patience: float = 90
    seed: int = 0
    # Share of keys sent to the slow view, working ``work`` s after the write: the monkey's mark.
    slow_share: float = 0
    work: float = 0.2


def storm(port: int, plan: StormPlan, prefix: str = "storm") -> dict[str, list[Answer]]:
    """Every key sent by ``per_key`` concurrent clients; each client's answers, per key."""
    keys = new_keys(plan.keys, prefix)
    pick = random.Random(plan.seed)
    work = {key: plan.work if pick.random() < plan.slow_share else 0.0 for key in keys}
    answers: dict[str, list[Answer]] = {key: [] for key in keys}
    with ThreadPoolExecutor(plan.clients, thread_name_prefix="idem_sys-client") as pool:
        # Key-major order: a key's clients are taken by neighbouring threads, so they race.
        jobs = [
            (key, pool.submit(_client, port, key, plan, work[key], f"{plan.seed}-{key}-{n}"))
            for key in keys
            for n in range(plan.per_key)
        ]
        for key, job in jobs:
            answers[key].extend(job.result())
    return answers


def _client(port: int, key: str, plan: StormPlan, work: float, seed: str) -> list[Answer]:
    rng = random.Random(seed)
    path = SLOW_CHARGES if work else CHARGES
    answers = retry_until_final(port, key, plan.patience, rng, path, work)
    if answers[-1].status == 201 and rng.random() < plan.late_duplicates:
        time.sleep(rng.uniform(0, 0.5))
        answers += retry_until_final(port, key, plan.patience, rng, path, work)
    return answers


# --- the monkey --------------------------------------------------------------------------------


class Monkey:
    """Every ``interval`` s, SIGKILLs a worker or terminates a backend that is mid-transaction.

    It alternates the two, and stops after ``budget`` of each (``None``: never).
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
        self._thread.join(30)

    @property
    def done(self) -> bool:
        return self.budget is not None and min(self.killed, self.terminated) >= self.budget

    def _run(self) -> None:
        while not self._stop.wait(self.interval) and not self.done:
            victims = self.database.backends(in_transaction=True)
            if not victims:
                continue
            victim = self.rng.choice(victims)
            if self.killed <= self.terminated:
                self.killed += self.server.kill_worker(victim.worker)
            else:
                self.terminated += self.database.terminate(victim)


# --- one request in the middle of its business work --------------------------------------------


@dataclass
class InFlight:
    """A slow request whose charge is written but not committed, held open by its worker."""

    key: str
    path: str
    answers: list[Answer] = field(default_factory=list)
    thread: threading.Thread | None = None
    backend: Backend | None = None

    def answer(self, within: float = 180) -> Answer:
        assert self.thread is not None
        self.thread.join(within)
        assert not self.thread.is_alive(), f"request {self.key} still running after {within}s"
        return self.answers[0]


def start_slow(
    port: int, database: ScratchDatabase, key: str, path: str = SLOW_CHARGES, delay: float = 60
) -> InFlight:
    """Send a request that keeps working ``delay`` s after its write; return once it does."""
    flight = InFlight(key, path)

    def send() -> None:
        flight.answers.append(charge(port, key, path, delay))

    flight.thread = threading.Thread(target=send, name=f"idem_sys-slow-{key}", daemon=True)
    flight.thread.start()
    flight.backend = wait_for_backend(database, key)
    return flight


def wait_for_backend(database: ScratchDatabase, key: str, within: float = 120) -> Backend:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        for backend in database.backends(in_transaction=True):
            if backend.key == key:
                return backend
        time.sleep(0.05)
    raise AssertionError(f"no backend in a transaction for {key} within {within}s")


def lease_end(database: ScratchDatabase, key: str) -> float:
    """When the key's claim stops being trusted, as a Unix time (the server's clock is ours)."""
    _, locked_until = database.entries([key])[key]
    return float(locked_until.timestamp())


def wait_for_lease(database: ScratchDatabase, key: str) -> None:
    time.sleep(max(0.0, lease_end(database, key) - time.time()) + 0.1)


# --- the scenarios: each returns what broke (empty: the promise held) ---------------------------


@dataclass
class Outcome:
    scenario: str
    key: str
    requests: int
    problems: list[str]
    keys: int = 1


def expect(ok: bool, problem: str) -> list[str]:
    return [] if ok else [problem]


def kill_mid_work(server: Gunicorn, database: ScratchDatabase, key: str) -> Outcome:
    """SIGKILL the worker between the charge's INSERT and COMMIT; the lease, then one retry runs."""
    flight = start_slow(server.port, database, key)
    assert flight.backend is not None
    killed = server.kill_worker(flight.backend.worker)
    answer = flight.answer()
    problems = expect(killed, f"{key}: worker {flight.backend.worker} is not one of ours")
    problems += expect(answer.status == 0, f"{key}: the killed worker answered {answer.status}")
    problems += abandoned(database, key)
    if problems:
        return Outcome("kill", key, 1, problems)
    ends = lease_end(database, key)
    answers = retry_until_final(
        server.port, key, server.lease * 3 + 60, random.Random(key), flight.path
    )
    answers.append(charge(server.port, key, flight.path))
    problems = conflicts_until(answers, ends) + executed_once(database, key, answers)
    return Outcome("kill", key, 1 + len(answers), problems)


def terminate_mid_transaction(server: Gunicorn, database: ScratchDatabase, key: str) -> Outcome:
    """pg_terminate_backend between the charge's INSERT and COMMIT: a 5xx, then one retry runs."""
    flight = start_slow(server.port, database, key)
    assert flight.backend is not None
    terminated = database.terminate(flight.backend)
    answer = flight.answer()
    problems = expect(terminated, f"{key}: backend {flight.backend.pid} not terminated")
    problems += expect(500 <= answer.status < 600, f"{key}: answered {answer.status}, not a 5xx")
    problems += expect(database.charges([key])[key] == [], f"{key}: the charge committed")
    answers = retry_until_final(
        server.port, key, server.lease * 3 + 60, random.Random(key), flight.path
    )
    answers.append(charge(server.port, key, flight.path))
    problems += executed_once(database, key, answers)
    return Outcome("terminate", key, 1 + len(answers), problems)


def purge_reclaims_abandoned(server: Gunicorn, database: ScratchDatabase, key: str) -> Outcome:
    """A killed worker's claim, nobody retrying: once its lease passes, purge deletes it."""
    flight = start_slow(server.port, database, key)
    assert flight.backend is not None
    server.kill_worker(flight.backend.worker)
    flight.answer()
    problems = abandoned(database, key)
    wait_for_lease(database, key)
    report = manage(database.url, "purge_idempotency")
    problems += expect(key not in database.entries([key]), f"{key}: purge kept it: {report!r}")
    problems += expect(database.charges([key])[key] == [], f"{key}: a charge appeared")
    answers = [charge(server.port, key, flight.path), charge(server.port, key, flight.path)]
    problems += expect(answers[0].status == 201 and not answers[0].replayed, f"{key}: not new")
    problems += executed_once(database, key, answers)
    return Outcome("purge", key, 3, problems)


def outlive_lease(
    server: Gunicorn, database: ScratchDatabase, key: str, work: float = 12
) -> Outcome:
    """A live request past its 2 s lease: duplicates get 409 and purge leaves it alone."""
    flight = start_slow(server.port, database, key, SHORT_LEASE_CHARGES, work)
    wait_for_lease(database, key)
    duplicate = charge(server.port, key, flight.path)
    report = manage(database.url, "purge_idempotency")
    entry = database.entries([key]).get(key)
    # Only meaningful while it still runs; on a machine too slow for that, the rest still holds.
    running = flight.thread is not None and flight.thread.is_alive()
    problems = []
    if running:
        problems += expect(duplicate.status == 409, f"{key}: duplicate got {duplicate.status}")
        problems += expect(entry is not None, f"{key}: purge took a live claim: {report!r}")
    answers = [flight.answer(), duplicate, charge(server.port, key, flight.path)]
    problems += expect(answers[0].status == 201, f"{key}: the slow request got {answers[0].status}")
    problems += executed_once(database, key, answers)
    return Outcome("outlive", key, len(answers), problems)


def database_outage(
    server: Gunicorn, proxy: TcpProxy, database: ScratchDatabase, keys: list[str]
) -> Outcome:
    """The entries' database cut away: 503 problem+json, nothing ran; back: each key runs once."""
    proxy.cut()
    try:
        during = {key: charge(server.port, key) for key in keys}
    finally:
        proxy.restore()
    problems = [
        f"{key}: {a.status} {a.headers.get('content-type')} {a.body[:100]!r}"
        for key, a in during.items()
        if not (a.status == 503 and a.problem and a.headers.get("retry-after"))
    ]
    problems += expect(not any(database.charges(keys).values()), "charged during the outage")
    problems += expect(not database.entries(keys), "entries stored during the outage")
    rng = random.Random(keys[0])
    after = {key: retry_until_final(server.port, key, 60, rng) for key in keys}
    problems += judge(after, database).broken()
    requests = len(keys) + sum(map(len, after.values()))
    return Outcome("outage", keys[0], requests, problems, keys=len(keys))


def abandoned(database: ScratchDatabase, key: str) -> list[str]:
    """What a dead worker must leave: its claim in progress, its charge rolled back."""
    entry = database.entries([key]).get(key)
    problems = expect(
        database.charges([key])[key] == [], f"{key}: the dead worker's charge committed"
    )
    return problems + expect(
        entry is not None and entry[0] == "in_progress", f"{key}: claim after the kill: {entry}"
    )


def conflicts_until(answers: list[Answer], lease_ends: float) -> list[str]:
    """Every answer that arrived before the lease ended is a 409 with Retry-After."""
    early = [a for a in answers if a.received < lease_ends]
    return [
        f"before the lease ended: {a.status} {a.body[:100]!r}"
        for a in early
        if not (a.status == 409 and a.headers.get("retry-after"))
    ]


def executed_once(database: ScratchDatabase, key: str, answers: list[Answer]) -> list[str]:
    """One committed charge; one original 201 among ``answers``, the rest byte-identical replays."""
    successes = [a for a in answers if a.status == 201]
    charge_ids = database.charges([key])[key]
    originals = [a for a in successes if not a.replayed]
    problems = expect(len(charge_ids) == 1, f"{key}: committed charges {charge_ids}")
    problems += expect(
        len(originals) == 1, f"{key}: {len(originals)} originals in {statuses(answers)}"
    )
    problems += expect(
        answers[-1].replayed, f"{key}: last answer not a replay: {statuses(answers)}"
    )
    if successes and len(charge_ids) == 1:
        problems += [f"{key}: replay differs" for a in successes if a.body != successes[0].body]
        answered = json.loads(successes[0].body).get("id")
        problems += expect(
            answered == charge_ids[0], f"{key}: answered {answered}, committed {charge_ids}"
        )
    return problems


def statuses(answers: list[Answer]) -> list[str]:
    return [f"{a.status}{'r' if a.replayed else ''}" for a in answers]


# --- the judge ---------------------------------------------------------------------------------


@dataclass
class Verdict:
    """What a storm produced, counted; the promise holds when ``broken()`` is empty."""

    requests: int = 0
    keys: int = 0
    originals: int = 0
    replays: int = 0
    conflicts: int = 0
    server_errors: int = 0
    dropped: int = 0
    duplicates_committed: int = 0
    unexpected: list[str] = field(default_factory=list)
    inconsistent: list[str] = field(default_factory=list)
    unfinished: list[str] = field(default_factory=list)

    def add(self, other: Verdict) -> None:
        """Fold ``other`` in: counts add up, lists concatenate."""
        for item in fields(self):
            setattr(self, item.name, getattr(self, item.name) + getattr(other, item.name))

    def broken(self) -> list[str]:
        return [
            *(f"unexpected: {u}" for u in self.unexpected[:20]),
            *(f"inconsistent: {i}" for i in self.inconsistent[:20]),
            *(f"unfinished: {u}" for u in self.unfinished[:20]),
            *(
                [f"{self.duplicates_committed} duplicates committed"]
                * bool(self.duplicates_committed)
            ),
        ]


def judge(
    answers: dict[str, list[Answer]],
    database: ScratchDatabase,
    chaos: bool = False,
) -> Verdict:
    """Hold every answer and the tables to SPEC; ``chaos`` admits 5xx and dropped connections."""
    keys = list(answers)
    charges, entries = database.charges(keys), database.entries(keys)
    verdict = Verdict(keys=len(keys))
    for key in keys:
        _judge_key(verdict, key, answers[key], charges[key], entries.get(key), chaos)
    return verdict


def _judge_key(
    verdict: Verdict,
    key: str,
    answers: list[Answer],
    charge_ids: list[int],
    entry: tuple[str, Any] | None,
    chaos: bool,
) -> None:
    verdict.requests += len(answers)
    verdict.duplicates_committed += max(0, len(charge_ids) - 1)
    for answer in answers:
        _count(verdict, key, answer, chaos)
    successes = [a for a in answers if a.status == 201]
    if not successes or len(charge_ids) != 1 or entry is None or entry[0] != "completed":
        verdict.unfinished.append(f"{key}: {len(successes)} 201s, charges {charge_ids}, {entry}")
        return
    _judge_successes(verdict, key, successes, charge_ids[0], chaos)


def _count(verdict: Verdict, key: str, answer: Answer, chaos: bool) -> None:
    if answer.status == 201:
        verdict.replays += answer.replayed
        verdict.originals += not answer.replayed
    elif answer.status == 409 and answer.problem and answer.headers.get("retry-after"):
        verdict.conflicts += 1
    elif chaos and answer.status in (500, 503) and (answer.status == 500 or answer.problem):
        verdict.server_errors += 1
    elif chaos and answer.status == 0:
        verdict.dropped += 1
    else:
        detail = answer.error or answer.body[:200].decode("utf-8", "replace")
        verdict.unexpected.append(f"{key}: {answer.status} {detail}")


def _judge_successes(
    verdict: Verdict, key: str, successes: list[Answer], charge_id: int, chaos: bool
) -> None:
    first = successes[0]
    originals = sum(not a.replayed for a in successes)
    # A worker killed after its commit never sent its original: chaos may see none.
    if originals > 1 or (originals == 0 and not chaos):
        verdict.inconsistent.append(f"{key}: {originals} original answers")
    for answer in successes:
        same = (answer.body, answer.headers.get("location")) == (
            first.body,
            first.headers.get("location"),
        )
        if not same:
            verdict.inconsistent.append(f"{key}: replay differs: {answer.body!r} vs {first.body!r}")
    if json.loads(first.body).get("id") != charge_id:
        verdict.inconsistent.append(f"{key}: answered {first.body!r}, committed charge {charge_id}")


def table(rows: list[tuple[str, object]]) -> str:
    """A two-column plain-text table, as ``make stress`` prints it."""
    width = max(len(name) for name, _ in rows)
    lines = [f"{name:<{width}}  {value}" for name, value in rows]
    rule = "-" * max(len(line) for line in lines)
    return "\n".join([rule, *lines, rule])
