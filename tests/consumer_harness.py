"""What the real-broker consumer tests share: the handler their consumer processes run,
its trace, and the test side's spawning and waiting.

A consumer process (``python -m tests.consumer_<broker> ...``) runs
:func:`charge` for each event under :func:`idempotency_django.consumers.consume`
(through its broker's preset) and appends a line per step to
``$IDEMPOTENCY_TEST_TRACES/trace``: ``ran ID`` when the handler starts,
``committed ID`` once its transaction committed, then the verdict
(``ack ID``, ``retry ID``, ``dead_letter ID``) and its outcome
(``unavailable ID``, ``replayed ID``, ...). After the commit and before the
broker hears of it, the process waits while ``hold-ID`` exists there: the
tests kill it at that point.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from idempotency_django.consumers import GiveUp, Verdict

#: Fast, so the tests run in seconds: 3 failures are a dead letter.
POLICY = GiveUp(max_attempts=3, backoff=0.1, backoff_cap=0.5, unavailable_delay=0.2)
PATIENCE = 90.0
ROOT = Path(__file__).resolve().parent.parent


# The consumer process's side.


def charge(body: bytes) -> dict[str, Any]:
    """The handler: one Charge per event, in the claim's transaction; "poison" raises."""
    from django.db import transaction

    from tests.testapp.models import Charge

    event = json.loads(body)
    trace("ran", event["id"])
    made = Charge.objects.create(reference=event["id"], amount=int(event["amount"]))
    transaction.on_commit(lambda: _committed(event["id"]))
    return {"charge": made.pk}


def event_id(body: bytes) -> str:
    return str(json.loads(body)["id"])


def _committed(event: str) -> None:
    trace("committed", event)
    gate = Path(os.environ["IDEMPOTENCY_TEST_TRACES"]) / f"hold-{event}"
    while gate.exists():  # the test kills us here, or lifts the gate
        time.sleep(0.05)


def settled(verdict: Verdict, event: str) -> None:
    trace(verdict.action, event)
    trace(verdict.outcome, event)


def trace(step: str, event: str) -> None:
    path = Path(os.environ["IDEMPOTENCY_TEST_TRACES"]) / "trace"
    with path.open("a") as out:
        out.write(f"{step} {event}\n")


def setup() -> None:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    django.setup()


# The test's side.


def steps(traces: Path, step: str, event: str) -> int:
    path = traces / "trace"
    lines = path.read_text().splitlines() if path.exists() else []
    return lines.count(f"{step} {event}")


def count(traces: Path, step: str) -> int:
    path = traces / "trace"
    lines = path.read_text().splitlines() if path.exists() else []
    return sum(1 for line in lines if line.split(" ", 1)[0] == step)


def wait_for(condition: Callable[[], bool], what: str, traces: Path) -> None:
    deadline = time.monotonic() + PATIENCE
    while not condition():
        if time.monotonic() > deadline:
            log = (traces / "consumer.log").read_text()[-4000:]
            trace_text = (traces / "trace").read_text() if (traces / "trace").exists() else ""
            raise AssertionError(f"gave up waiting for {what}:\n{trace_text}\n{log}")
        time.sleep(0.05)


def via_port(url: str, port: int) -> str:
    """``url`` with its port replaced (a database reached through a proxy)."""
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)
    host = (parts.hostname or "127.0.0.1") + f":{port}"
    return urlunsplit(parts._replace(netloc=f"{netloc[0]}@{host}" if len(netloc) > 1 else host))


@contextmanager
def consumer(
    traces: Path, module: str, args: list[str], database: str, **env: str
) -> Iterator[subprocess.Popen[bytes]]:
    """``python -m module *args`` on ``database``, SIGKILLed (its group) when left."""
    environ = {
        **os.environ,
        **env,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": database,
        "IDEMPOTENCY_TEST_TRACES": str(traces),
    }
    with (traces / "consumer.log").open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            cwd=ROOT,
            env=environ,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            yield process
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)


def kill(process: subprocess.Popen[bytes]) -> None:
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(30)
