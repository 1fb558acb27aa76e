"""``django.tasks`` on a real ``db_worker`` (django-tasks-db's database backend) on PostgreSQL.

What the database backend does when its worker dies mid-task, measured here
(test_a_killed_worker_leaves_its_task_running_for_ever): nothing. The result stays
RUNNING, no worker takes a RUNNING task again, and the task never re-runs until
someone sets it back to READY. What ``idempotent_task`` adds: the killed body's
writes rolled back with its claim (or committed with its stored result), so
setting it back to READY, even while in doubt whether the first worker is dead,
gives one effect.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db.models.functions import Now
from django.test import Client

from idempotency_django.models import IdempotencyEntry
from idempotency_django.outbox import relay
from tests import dj_tasks
from tests.celery_harness import PATIENCE, ROOT, database_url
from tests.helpers import new_key, post
from tests.testapp.models import Charge

pytestmark = [
    pytest.mark.requires_postgres,
    pytest.mark.system,
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture
def traces(tmp_path: Path) -> Path:
    return tmp_path


@contextmanager
def db_worker(
    traces: Path, name: str, settings: str = "tests.settings"
) -> Iterator[subprocess.Popen[bytes]]:
    """A real ``manage.py db_worker`` on the test database; killed whatever happens."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": settings,
        "DATABASE_URL": database_url(),
        "IDEMPOTENCY_TEST_TRACES": str(traces),
    }
    command = [
        *(sys.executable, "-m", "django", "db_worker", "--backend", "database"),
        *("--interval", "0.1", "--no-startup-delay", "--no-reload", "-v", "2"),
        *("--worker-id", f"{name}-{uuid.uuid4().hex[:8]}"),
    ]
    with (traces / f"{name}.log").open("wb") as out:
        process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            yield process
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)


def wait_for(condition: Callable[[], bool], what: str, traces: Path) -> None:
    deadline = time.monotonic() + PATIENCE
    while not condition():
        if time.monotonic() > deadline:
            logs = "\n".join(p.read_text()[-3000:] for p in traces.glob("*.log"))
            raise AssertionError(f"gave up waiting for {what}:\n{logs}")
        time.sleep(0.1)


def runs(traces: Path, reference: str) -> int:
    path = traces / "runs"
    lines = path.read_text().splitlines() if path.exists() else []
    return sum(1 for line in lines if line.split()[0] == reference)


def charges(reference: str) -> int:
    return Charge.objects.filter(reference=reference).count()


def results(reference: str) -> list[Any]:
    from django_tasks_db.models import DBTaskResult

    found = DBTaskResult.objects.order_by("enqueued_at")
    return [row for row in found if row.args_kwargs["args"][:1] == [reference]]


def statuses(reference: str) -> list[str]:
    return [row.status for row in results(reference)]


def requeue(reference: str) -> None:
    """What an operator does for a task left RUNNING by a dead worker: make it READY again."""
    from django_tasks_db.models import DBTaskResult

    ids = [row.id for row in results(reference)]
    DBTaskResult.objects.filter(id__in=ids, status="RUNNING").update(status="READY")


def test_duplicate_deliveries_run_once(traces: Path) -> None:
    first = dj_tasks.db_by_key.enqueue("w1")
    again = dj_tasks.db_by_key.enqueue("w1")
    with db_worker(traces, "a"):
        wait_for(lambda: statuses("w1") == ["SUCCESSFUL"] * 2, "both results", traces)
    first.refresh()
    again.refresh()
    assert again.return_value == first.return_value
    assert (charges("w1"), runs(traces, "w1")) == (1, 1)


def test_a_killed_worker_leaves_its_task_running_for_ever(traces: Path) -> None:
    (traces / "hold-w2").touch()
    result = dj_tasks.db_by_result_id.enqueue("w2")
    with db_worker(traces, "a") as worker:
        wait_for(lambda: runs(traces, "w2") == 1, "the body to start", traces)
        os.killpg(worker.pid, signal.SIGKILL)
    (traces / "hold-w2").unlink()
    assert charges("w2") == 0  # its transaction, claim and write, rolled back
    with db_worker(traces, "b"):
        # A task enqueued after it has run: the live worker has polled past w2 (an event,
        # not a wait), and nothing took w2 again.
        dj_tasks.db_by_key.enqueue("w2-later")
        wait_for(lambda: statuses("w2-later") == ["SUCCESSFUL"], "a later task's run", traces)
        assert statuses("w2") == ["RUNNING"]
        assert runs(traces, "w2") == 1
        requeue("w2")
        wait_for(lambda: statuses("w2") == ["SUCCESSFUL"], "the re-run", traces)
    result.refresh()
    assert result.return_value["amount"] == 100
    assert (charges("w2"), runs(traces, "w2")) == (1, 2)


def test_a_worker_killed_after_the_commit_replays_on_the_re_run(traces: Path) -> None:
    (traces / "hold-after").touch()
    result = dj_tasks.db_by_result_id.enqueue("w3")
    with db_worker(traces, "a") as worker:
        wait_for((traces / "committed").exists, "the body's commit", traces)
        os.killpg(worker.pid, signal.SIGKILL)
    (traces / "hold-after").unlink()
    assert charges("w3") == 1
    assert statuses("w3") == ["RUNNING"]  # killed before db_worker recorded the success
    requeue("w3")
    with db_worker(traces, "b"):
        wait_for(lambda: statuses("w3") == ["SUCCESSFUL"], "the re-run", traces)
    result.refresh()
    assert result.return_value["amount"] == 100
    assert (charges("w3"), runs(traces, "w3")) == (1, 1)


def test_under_the_lease_protocol_the_re_run_waits_out_the_dead_claim(traces: Path) -> None:
    # The claim committed before the body: the killed worker leaves it IN_PROGRESS. The
    # re-run meets it, fails with RequestInProgress and enqueues itself again, deferred
    # (by at most the 5 s lease), until the lease has passed and the copy takes the claim
    # over. The lease's end is the test's to move (the row's time), so the re-run meets a
    # live claim however slow the machine, and the copy a dead one.
    (traces / "hold-w7").touch()
    dj_tasks.db_by_result_id.enqueue("w7")
    with db_worker(traces, "a", "tests.settings_lease") as first:
        wait_for(lambda: runs(traces, "w7") == 1, "the body to start", traces)
        with db_worker(traces, "b", "tests.settings_lease"):
            os.killpg(first.pid, signal.SIGKILL)
            _lease_ends_in(timedelta(hours=1))
            (traces / "hold-w7").unlink()
            requeue("w7")
            wait_for(lambda: "FAILED" in statuses("w7"), "the re-run to meet the claim", traces)
            _lease_ends_in(-timedelta(seconds=1))
            wait_for(lambda: "SUCCESSFUL" in statuses("w7"), "the deferred copy", traces)
    assert statuses("w7")[0] == "FAILED"  # the re-run that met the dead claim
    assert (charges("w7"), runs(traces, "w7")) == (1, 2)


def _lease_ends_in(delta: timedelta) -> None:
    """The claim in progress (a dead worker's) ends its lease ``delta`` from the database's now."""
    claims = IdempotencyEntry.objects.filter(status=IdempotencyEntry.Status.IN_PROGRESS)
    assert claims.update(locked_until=Now() + delta) == 1


def test_two_workers_racing_one_key_run_it_once(traces: Path) -> None:
    (traces / "hold-w4").touch()
    dj_tasks.db_by_key.enqueue("w4")
    dj_tasks.db_by_key.enqueue("w4")
    with db_worker(traces, "a"), db_worker(traces, "b"):
        # One holds the key; the other meets it in flight, fails with RequestInProgress
        # and enqueues the same call again, deferred, carrying the key.
        wait_for(lambda: "FAILED" in statuses("w4"), "the duplicate in flight", traces)
        (traces / "hold-w4").unlink()
        wait_for(
            lambda: sorted(statuses("w4")) == ["FAILED", "SUCCESSFUL", "SUCCESSFUL"],
            "the holder and the deferred copy",
            traces,
        )
    values = [row.task_result.return_value for row in results("w4") if row.status == "SUCCESSFUL"]
    assert values[0] == values[1]
    assert (charges("w4"), runs(traces, "w4")) == (1, 1)


@pytest.mark.urls("tests.testapp.django_tasks_views")
def test_an_outbox_enqueue_in_a_view_is_delivered_once_after_commit(
    client: Client, traces: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django_tasks_db import DatabaseBackend

    def down(*args: Any, **kwargs: Any) -> None:
        raise ConnectionRefusedError("tasks backend down")

    body = {"reference": "w5", "task": "db_by_result_id"}
    with monkeypatch.context() as patched:
        patched.setattr(DatabaseBackend, "enqueue", down)
        assert post(client, "/tasks/orders/", new_key(), body).status_code == 201
    failed = {**body, "reference": "w6", "fail": True}
    assert post(client, "/tasks/orders/", new_key(), failed).status_code == 503
    assert results("receipt-w5") == []
    with db_worker(traces, "a"):
        assert relay(ignore_schedule=True) == {"sent": 1, "failed": 0}
        wait_for(lambda: statuses("receipt-w5") == ["SUCCESSFUL"], "the delivery", traces)
        assert relay(ignore_schedule=True) == {"sent": 0, "failed": 0}
    assert charges("receipt-w5") == 1
    assert charges("receipt-w6") == 0
    assert results("receipt-w6") == []
