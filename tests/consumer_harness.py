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

import functools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

from idempotency_django.consumers import GiveUp, Verdict

#: Fast, so the tests run in seconds: 3 failures are a dead letter.
POLICY = GiveUp(max_attempts=3, backoff=0.1, backoff_cap=0.5, unavailable_delay=0.2)
PATIENCE = 90.0
ROOT = Path(__file__).resolve().parent.parent


# The consumer process's side.


def charge(body: bytes) -> dict[str, Any]:
    """The handler: one Charge per event, in the claim's transaction. An ``amount`` of
    "poison" raises; of a name in :data:`FAILURES`, fails that way."""
    from django.db import transaction

    from tests.testapp.models import Charge

    event = json.loads(body)
    trace("ran", event["id"])
    if event["amount"] in FAILURES:
        FAILURES[event["amount"]]()
    made = Charge.objects.create(reference=event["id"], amount=int(event["amount"]))
    transaction.on_commit(lambda: _committed(event["id"]))
    return {"charge": made.pk}


def _statement_timeout() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL statement_timeout = '10ms'")
        cursor.execute("SELECT pg_sleep(5)")


def _deadlock() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("DO $$ BEGIN RAISE EXCEPTION 'deadlock' USING ERRCODE = '40P01'; END $$")


def _killed() -> None:
    os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer or a segfault would


#: What a handler meets, by the event's ``amount`` (PostgreSQL's own errors: real ones).
FAILURES: dict[str, Callable[[], None]] = {
    "timeout": _statement_timeout,
    "deadlock": _deadlock,
    "kill": _killed,
}


def wire_id(event: dict[str, Any]) -> str:
    """The broker's own message id for ``event`` (a header or property, not the key)."""
    return f"{event['id']}-{event.get('version', 1)}".replace("\x00", "0")


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


def _stepped(traces: Path, step: str, event: str) -> bool:
    return steps(traces, step, event) == 1


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


# The three scenarios every real broker must pass, over a small adapter per broker.


class Broker(Protocol):
    def publish(self, *events: dict[str, Any]) -> None:
        """Send each event (``{"id": ..., "amount": ...}``) as one message."""

    def drained(self) -> bool:
        """Nothing left to deliver or to acknowledge."""

    def dead_letters(self) -> list[str]:
        """The event ids on the dead-letter path, in order."""

    def consumer(self, traces: Path, database: str) -> Any:
        """A context manager running the broker's consumer process on ``database``."""


def killed_after_the_commit_and_before_the_ack(broker: Broker, traces: Path, database: str) -> None:
    """SIGKILL after the commit, before the ack: the redelivery replays; one effect."""
    from tests.testapp.models import Charge

    (traces / "hold-e1").touch()
    broker.publish({"id": "e1", "amount": 10})
    with broker.consumer(traces, database) as first:
        wait_for(lambda: steps(traces, "committed", "e1") == 1, "the commit", traces)
        kill(first)
    (traces / "hold-e1").unlink()
    assert Charge.objects.filter(reference="e1").count() == 1
    assert steps(traces, "ack", "e1") == 0
    with broker.consumer(traces, database):
        wait_for(lambda: steps(traces, "ack", "e1") == 1, "the ack", traces)
        wait_for(broker.drained, "nothing left pending", traces)
    assert steps(traces, "replayed", "e1") == 1
    assert steps(traces, "ran", "e1") == 1
    assert Charge.objects.filter(reference="e1").count() == 1


def database_outage_mid_stream(broker: Broker, traces: Path, database: str) -> None:
    """PostgreSQL cut away (a proxy; the shared server keeps running) while events
    arrive: none is given up on, and after the restore each is processed once."""
    from tests.broker_proxy import CuttableProxy
    from tests.testapp.models import Charge

    before = [{"id": f"b{n}", "amount": n} for n in range(3)]
    during = [{"id": f"d{n}", "amount": n} for n in range(5)]
    proxy = CuttableProxy(int(urlsplit(database).port or 5432))
    try:
        broker.publish(*before)
        with broker.consumer(traces, via_port(database, proxy.port)):
            wait_for(lambda: count(traces, "ack") == 3, "the first acks", traces)
            proxy.cut()
            broker.publish(*during)
            # Every event meets the outage more often than the policy's max_attempts
            # before the database is back: none of those retries counts as a failure.
            retries = len(during) * (POLICY.max_attempts + 1)
            wait_for(lambda: count(traces, "unavailable") >= retries, "the outage", traces)
            proxy.restore()
            wait_for(lambda: count(traces, "ack") == 8, "every ack", traces)
            wait_for(broker.drained, "nothing left pending", traces)
    finally:
        proxy.close()
    assert count(traces, "dead_letter") == 0
    assert count(traces, "failed") == 0
    for event in before + during:
        assert Charge.objects.filter(reference=event["id"]).count() == 1, event
        assert steps(traces, "committed", str(event["id"])) == 1, event
    assert broker.dead_letters() == []


def poison_is_dead_lettered_and_leaves_its_key_free(
    broker: Broker, traces: Path, database: str
) -> None:
    """Tried POLICY.max_attempts times, moved to the dead-letter path, its key left free:
    the producer's fixed event under the same id then runs once."""
    from idempotency_django.consumers.models import ConsumerFailure
    from idempotency_django.models import IdempotencyEntry
    from tests.testapp.models import Charge

    broker.publish({"id": "p1", "amount": "poison"}, {"id": "e2", "amount": 5})
    with broker.consumer(traces, database):
        wait_for(lambda: steps(traces, "dead_letter", "p1") == 1, "the dead letter", traces)
        wait_for(lambda: steps(traces, "ack", "e2") == 1, "the next event", traces)
        assert steps(traces, "ran", "p1") == POLICY.max_attempts
        assert not IdempotencyEntry.objects.filter(key__endswith="\x1fp1").exists()
        # The count stays as the admin's dead letter; none is counting on.
        assert ConsumerFailure.objects.get(key__endswith="\x1fp1").dead_at is not None
        wait_for(lambda: broker.dead_letters() == ["p1"], "the dead-letter path", traces)
        broker.publish({"id": "p1", "amount": 7, "version": 2})
        wait_for(lambda: steps(traces, "ack", "p1") == 1, "the fixed event", traces)
        wait_for(broker.drained, "nothing left pending", traces)
    assert Charge.objects.filter(reference="p1").count() == 1


def database_errors_of_the_handler_are_counted_then_dead_lettered(
    broker: Broker, traces: Path, database: str
) -> None:
    """A statement timeout and a deadlock in the handler (PostgreSQL's, real): failures,
    tried POLICY.max_attempts times, dead-lettered; the event behind them handled."""
    from idempotency_django.consumers.models import ConsumerFailure
    from tests.testapp.models import Charge

    broker.publish(
        {"id": "t1", "amount": "timeout"},
        {"id": "d1", "amount": "deadlock"},
        {"id": "e2", "amount": 5},
    )
    with broker.consumer(traces, database):
        wait_for(lambda: steps(traces, "ack", "e2") == 1, "the next event", traces)
        for event in ("t1", "d1"):
            wait_for(functools.partial(_stepped, traces, "dead_letter", event), event, traces)
        wait_for(lambda: sorted(broker.dead_letters()) == ["d1", "t1"], "the dead letters", traces)
        wait_for(broker.drained, "nothing left pending", traces)
    assert steps(traces, "ran", "t1") == steps(traces, "ran", "d1") == POLICY.max_attempts
    assert count(traces, "unavailable") == 0
    assert ConsumerFailure.objects.filter(dead_at=None).count() == 0  # both dead letters
    assert ConsumerFailure.objects.count() == 2
    assert Charge.objects.filter(reference="e2").count() == 1


def killed_inside_the_handler_is_dead_lettered_after_max_attempts_runs(
    broker: Broker, traces: Path, database: str
) -> None:
    """A handler that SIGKILLs its own process (each delivery): run POLICY.max_attempts
    times, then dead-lettered without running; the event behind it handled."""
    from idempotency_django.consumers.models import ConsumerFailure
    from idempotency_django.models import IdempotencyEntry
    from tests.testapp.models import Charge

    broker.publish({"id": "k1", "amount": "kill"}, {"id": "e3", "amount": 3})
    for run in range(1, POLICY.max_attempts + 1):
        with broker.consumer(traces, database) as process:
            wait_for(lambda: process.poll() is not None, f"run {run} to kill its process", traces)
        assert steps(traces, "ran", "k1") == run
    with broker.consumer(traces, database):
        wait_for(lambda: steps(traces, "dead_letter", "k1") == 1, "the dead letter", traces)
        wait_for(lambda: steps(traces, "ack", "e3") == 1, "the next event", traces)
        wait_for(lambda: broker.dead_letters() == ["k1"], "the dead-letter path", traces)
        wait_for(broker.drained, "nothing left pending", traces)
    assert steps(traces, "ran", "k1") == POLICY.max_attempts
    dead = ConsumerFailure.objects.get()
    assert (dead.failures, dead.dead_at is not None) == (POLICY.max_attempts, True)
    assert not IdempotencyEntry.objects.filter(key__endswith="\x1fk1").exists()
    assert Charge.objects.filter(reference="e3").count() == 1


#: Ids the entries cannot hold: too long (with the scope, over 255), a NUL (PostgreSQL).
UNSTORABLE = ("x" * 250, "nul\x00id")


def unstorable_ids_are_dead_lettered_and_the_next_handled(
    broker: Broker, traces: Path, database: str
) -> None:
    """An id the store cannot hold is a dead letter (never run, never a crash); the
    consumer goes on to the event behind it."""
    from tests.testapp.models import Charge

    broker.publish(*({"id": event, "amount": 1} for event in UNSTORABLE), {"id": "e4", "amount": 4})
    with broker.consumer(traces, database) as process:
        wait_for(lambda: steps(traces, "ack", "e4") == 1, "the next event", traces)
        for event in UNSTORABLE:
            wait_for(functools.partial(_stepped, traces, "unstorable", event), "dead", traces)
        wait_for(lambda: sorted(broker.dead_letters()) == sorted(UNSTORABLE), "dead", traces)
        wait_for(broker.drained, "nothing left pending", traces)
        assert process.poll() is None  # never crashed
    assert all(steps(traces, "ran", event) == 0 for event in UNSTORABLE)
    assert Charge.objects.count() == 1


def two_consumers_race_one_message(broker: Broker, traces: Path, database: str) -> None:
    """One event published twice (two broker ids, one event id), two consumers: one run,
    one effect, both deliveries acked, nothing counted or dead-lettered."""
    from idempotency_django.consumers.models import ConsumerFailure
    from tests.testapp.models import Charge

    broker.publish({"id": "r1", "amount": 1}, {"id": "r1", "amount": 1, "version": 2})
    with broker.consumer(traces, database), broker.consumer(traces, database):
        wait_for(lambda: steps(traces, "ack", "r1") == 2, "both acks", traces)
        wait_for(broker.drained, "nothing left pending", traces)
    assert steps(traces, "ran", "r1") == steps(traces, "committed", "r1") == 1
    assert Charge.objects.filter(reference="r1").count() == 1
    assert not ConsumerFailure.objects.exists()
    assert broker.dead_letters() == []
