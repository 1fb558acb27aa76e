"""One harness for the tests that run a real ``celery worker`` subprocess.

:func:`start_worker` starts ``celery -A tests.celery_app worker`` on the test
database and a broker (Redis or RabbitMQ), with a scratch directory the test
tasks (:mod:`tests.celery_tasks`) write their traces to: one line per delivery
seen and per body run, so a test counts them without timing anything.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit

from celery import Celery
from django.db import connection

from tests import celery_app
from tests.conftest import reachable, service_missing

ROOT = Path(__file__).resolve().parent.parent
RABBITMQ_URL = os.environ.get(
    "IDEMPOTENCY_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672//"
)
#: Long enough for a loaded 2-core machine; a wait that hits it is a failure, not a measure.
PATIENCE = 90.0


def database_url() -> str:
    """The URL of the database this test runs on, for a subprocess."""
    db = connection.settings_dict
    auth = quote(db["USER"] or "", safe="")
    if db["PASSWORD"]:
        auth += ":" + quote(db["PASSWORD"], safe="")
    scheme, port = ("mysql", 3306) if connection.vendor == "mysql" else ("postgres", 5432)
    return f"{scheme}://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or port}/{db['NAME']}"


def broker_url(kind: str) -> str:
    """The broker of a ``kind`` ("redis" or "rabbitmq"); skips (fails under CI) if unreachable."""
    url = celery_app.BROKER_URL if kind == "redis" else RABBITMQ_URL
    parts = urlsplit(url)
    default_port = 6379 if kind == "redis" else 5672
    if not reachable(parts.hostname or "127.0.0.1", parts.port or default_port):
        service_missing(f"{kind} broker at {url} is unreachable")
    return url


@dataclass
class Worker:
    """A running worker: its process, its app (to publish with) and its trace directory."""

    process: subprocess.Popen[bytes]
    app: Celery
    traces: Path
    log: Path
    queue: str

    def lines(self, name: str) -> list[str]:
        path = self.traces / name
        return path.read_text().splitlines() if path.exists() else []

    def deliveries(self, task_id: str) -> int:
        """Deliveries the worker started for ``task_id`` (redeliveries and retries included)."""
        return sum(1 for line in self.lines("deliveries") if line.split()[0] == task_id)

    def finished(self, task_id: str, state: str = "SUCCESS") -> int:
        return sum(1 for line in self.lines("finished") if line.split()[:2] == [task_id, state])

    def runs(self, tag: str) -> int:
        """Times a task body ran for ``tag`` (committed or not)."""
        return self.lines("runs").count(tag)

    def wait_for(self, condition: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + PATIENCE
        while not condition():
            if self.process.poll() is not None:
                raise AssertionError(f"the worker exited while waiting for {what}:\n{self.text()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"gave up waiting for {what}; worker log:\n{self.text()}")
            time.sleep(0.1)

    def text(self) -> str:
        return self.log.read_text(errors="replace")[-6000:]

    def children(self) -> list[int]:
        found = subprocess.run(
            ["pgrep", "-P", str(self.process.pid)], capture_output=True, text=True, check=False
        )
        return [int(pid) for pid in found.stdout.split()]


@contextmanager
def start_worker(
    directory: Path,
    broker: str = "redis",
    *,
    concurrency: int = 1,
    pool: str = "prefork",
    visibility_timeout: float | None = None,
    database: str | None = None,
    joining: Worker | None = None,
) -> Iterator[Worker]:
    """A real worker on the test database (or ``database``, a URL to reach it by); killed
    (its children too) whatever happens. ``joining`` another, it consumes that one's queue
    and writes to its traces (two workers racing for one queue's messages)."""
    url = broker_url(broker)
    # A fresh queue: no message of a killed run.
    queue = joining.queue if joining else f"idem_tasks_{uuid.uuid4().hex[:8]}"
    app = celery_app.make_app(url, celery_app.BACKEND_URL, queue, visibility_timeout)
    traces = joining.traces if joining else directory / "traces"
    traces.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": database or database_url(),
        "IDEMPOTENCY_TEST_CELERY_URL": url,
        "IDEMPOTENCY_TEST_CELERY_BACKEND": celery_app.BACKEND_URL,
        "IDEMPOTENCY_TEST_CELERY_QUEUE": queue,
        "IDEMPOTENCY_TEST_VISIBILITY_TIMEOUT": str(visibility_timeout or ""),
        "IDEMPOTENCY_TEST_TRACES": str(traces),
    }
    command = [
        *(sys.executable, "-m", "celery", "-A", "tests.celery_app", "worker"),
        *(f"--pool={pool}", f"--concurrency={concurrency}", "--prefetch-multiplier=1"),
        *("--without-gossip", "--without-mingle", "--without-heartbeat"),
        *("-Q", queue, "--loglevel=INFO"),
        # A node name of its own: two suites at once (tox envs in parallel) on one
        # RabbitMQ would otherwise share celery@host's exclusive pidbox queue.
        *("-n", f"{queue}{'-joined' if joining else ''}@%h"),
    ]
    log = directory / ("joined.log" if joining else "worker.log")
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            yield Worker(process, app, traces, log, queue)
        finally:
            _stop(process)
            _delete_queue(app, queue)


def _stop(process: subprocess.Popen[bytes]) -> None:
    # Its own session: the signal reaches the pool's children, never another suite's.
    for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        if process.poll() is not None:
            break
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # children left behind by a warm shutdown


def _delete_queue(app: Celery, queue: str) -> None:
    try:
        with app.connection_for_write() as conn:
            conn.default_channel.queue_delete(queue)  # type: ignore[attr-defined]
    except Exception:  # a broker gone away already: nothing left to tidy
        pass
