"""``django.tasks`` tasks for the tests (module level, as the Tasks framework requires).

``immediate_*`` run on the ImmediateBackend (``TASKS["default"]``); ``db_*`` on the
database backend, run by a real ``db_worker`` (tests/test_django_tasks_worker.py),
which writes a trace line per body run to ``$IDEMPOTENCY_TEST_TRACES/runs`` and
sleeps where ``$IDEMPOTENCY_TEST_TRACES/hold-<reference>`` exists: the test kills
it there.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import django

from idempotency_django import signals
from idempotency_django.django_tasks import idempotent_task
from tests.testapp.models import Charge

if django.VERSION >= (6, 0):
    from django.tasks import TaskContext, task
else:
    from django_tasks import TaskContext, task  # type: ignore[assignment,no-redef]

__all__ = ["TaskContext", "task"]


def _charge(reference: str, amount: int) -> dict[str, Any]:
    made = Charge.objects.create(reference=reference, amount=amount)
    return {"id": made.pk, "amount": amount}


@task(takes_context=True)
@idempotent_task
def immediate_by_result_id(context: Any, reference: str, amount: int = 100) -> dict[str, Any]:
    return _charge(reference, amount)


@task()
@idempotent_task(key=lambda reference, amount=100: f"charge-{reference}")
def immediate_by_key(reference: str, amount: int = 100) -> dict[str, Any]:
    return _charge(reference, amount)


@task()
@idempotent_task(key=lambda reference: reference, on_in_progress="drop")
def immediate_drop(reference: str) -> dict[str, Any]:
    return _charge(reference, 1)


@task()
@idempotent_task(key=lambda reference: reference, on_in_progress="raise")
def immediate_raise(reference: str) -> dict[str, Any]:
    return _charge(reference, 1)


@task()
@idempotent_task(key=lambda reference: reference)
def immediate_retry(reference: str) -> dict[str, Any]:
    return _charge(reference, 1)


@task()
def plain(reference: str) -> None:
    _charge(reference, 1)


def _traced(reference: str, amount: int) -> dict[str, Any]:
    traces = Path(os.environ["IDEMPOTENCY_TEST_TRACES"])
    with (traces / "runs").open("a") as out:
        out.write(f"{reference} {os.getpid()}\n")
    made = _charge(reference, amount)
    deadline = time.monotonic() + 120
    while (traces / f"hold-{reference}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)  # written, not committed: the test kills the worker here
    return made


@task(backend="database", takes_context=True)
@idempotent_task
def db_by_result_id(context: Any, reference: str, amount: int = 100) -> dict[str, Any]:
    return _traced(reference, amount)


@task(backend="database")
@idempotent_task(key=lambda reference, amount=100: f"charge-{reference}")
def db_by_key(reference: str, amount: int = 100) -> dict[str, Any]:
    return _traced(reference, amount)


def _hold_after_commit(sender: object, **kwargs: Any) -> None:
    # Sent once the body's writes and its stored result have committed: the test
    # kills the worker here, before db_worker marks the result successful.
    traces = os.environ.get("IDEMPOTENCY_TEST_TRACES")
    if not traces or sender != "task" or not (Path(traces) / "hold-after").exists():
        return
    (Path(traces) / "committed").touch()
    deadline = time.monotonic() + 120
    while (Path(traces) / "hold-after").exists() and time.monotonic() < deadline:
        time.sleep(0.05)


if os.environ.get("IDEMPOTENCY_TEST_TRACES"):
    # Only in a worker the crash tests start: connected in the suite's own process, this
    # receiver would make every outcome "wanted" and build it (tests/test_hot_path.py).
    signals.outcome.connect(_hold_after_commit, dispatch_uid="tests.dj_tasks.hold_after_commit")
