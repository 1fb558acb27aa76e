"""The tasks the worker tests send: each writes ``Charge`` rows, the business effect counted.

They leave traces (see :mod:`tests.celery_harness`) in ``IDEMPOTENCY_TEST_TRACES``:
``deliveries`` (one line per delivery started: task id, name), ``finished`` (task
id, state) and ``runs`` (one line per body run: the reference).
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import os
import time
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

from celery import Task, shared_task
from celery.signals import task_postrun, task_prerun

from idempotency_django.calls import idempotent_function
from idempotency_django.celery import idempotent_task
from idempotency_django.consumers import GiveUp

PATIENCE = 90.0


def _traces() -> Path | None:
    where = os.environ.get("IDEMPOTENCY_TEST_TRACES")
    return Path(where) if where else None


def trace(name: str, line: str) -> None:
    traces = _traces()
    if traces is not None:
        # One short O_APPEND write per line: whole lines even from several processes.
        with (traces / name).open("a") as file:
            file.write(line + "\n")


@task_prerun.connect
def _delivered(task_id: str, task: Task[Any, Any], **kwargs: Any) -> None:
    trace("deliveries", f"{task_id} {task.name}")


@task_postrun.connect
def _finished(task_id: str, state: str | None = None, **kwargs: Any) -> None:
    trace("finished", f"{task_id} {state}")


def _count(name: str, task_id: str) -> int:
    traces = _traces()
    path = traces / name if traces else None
    if path is None or not path.exists():
        return 0
    return sum(1 for line in path.read_text().splitlines() if line.split()[0] == task_id)


def _marker(name: str) -> Path:
    traces = _traces()
    assert traces is not None, "IDEMPOTENCY_TEST_TRACES is not set"
    return traces / name


def _wait(condition: Any, what: str) -> None:
    deadline = time.monotonic() + PATIENCE
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"test task gave up waiting for {what}")
        time.sleep(0.05)


def _write(reference: str, amount: int) -> dict[str, Any]:
    from tests.testapp.models import Charge

    trace("runs", reference)
    charge = Charge.objects.create(reference=reference, amount=amount)
    return {"id": charge.pk, "reference": reference, "amount": amount}


@shared_task(
    bind=True, name="tests.charge", acks_late=True, reject_on_worker_lost=True, max_retries=50
)
@idempotent_task
def charge(self: Task[Any, Any], reference: str, amount: int, mode: str = "plain") -> Any:
    """One Charge row; ``mode`` shapes the first delivery (see the tests)."""
    result = _write(reference, amount)
    if mode == "block_until_killed" and not _marker(f"killed-{reference}").exists():
        _marker(f"pid-{reference}").write_text(str(os.getpid()))
        _wait(lambda: False, "the SIGKILL")
    elif mode == "block_until_redelivered":
        task_id = str(self.request.id)
        # Held open until a redelivery of this very message has come and gone.
        _wait(lambda: _count("finished", task_id) >= 1, "a redelivery")
    elif mode == "retry_once" and self.request.retries == 0:
        raise self.retry(countdown=0)
    elif mode == "fail_once" and not _marker(f"failed-{reference}").exists():
        _marker(f"failed-{reference}").write_text("")
        raise ValueError("the first run fails after its write")
    elif mode == "hold":
        task_id = str(self.request.id)
        _wait(lambda: _count("deliveries", task_id) >= 4, "other deliveries")
    return result


@shared_task(
    bind=True, name="tests.charge_leased", acks_late=True, reject_on_worker_lost=True, max_retries=1
)
@idempotent_task(protocol="lease")
def charge_leased(self: Task[Any, Any], reference: str, amount: int, mode: str = "plain") -> Any:
    """Under "lease", one retry of its own: waiting for a held key must not spend it."""
    result = _write(reference, amount)
    if mode == "retry_once" and not _marker(f"retried-{reference}").exists():
        _marker(f"retried-{reference}").write_text("")
        raise self.retry(countdown=0)
    return result


@shared_task(
    name="tests.charge_unbound", acks_late=True, reject_on_worker_lost=True, max_retries=50
)
@idempotent_task(key=lambda reference, amount: f"charge-{reference}", on_in_progress="drop")
def charge_unbound(reference: str, amount: int) -> Any:
    """Unbound, keyed by the business reference whatever the task id."""
    return _write(reference, amount)


@shared_task(name="tests.rich_result", acks_late=True, reject_on_worker_lost=True, max_retries=50)
@idempotent_task
def rich_result(reference: str) -> dict[str, Any]:
    """A result that only round-trips with the tagged JSON serialiser."""
    _write(reference, 1)
    return {
        "uuid": uuid.uuid4(),
        "amount": Decimal("10.10"),
        "at": dt.datetime.now(dt.UTC),
        "day": dt.date(2026, 11, 22),
    }


@shared_task(name="tests.receipt", acks_late=True, reject_on_worker_lost=True, max_retries=50)
@idempotent_task
def receipt(reference: str) -> dict[str, Any]:
    """The outbox's consumer: a receipt per charge, once per outbox key (the task id)."""
    return _write(f"receipt:{reference}", 0)


@idempotent_function(key=lambda reference: f"inner-{reference}", scope="tests.inner")
def inner_call(reference: str) -> str:
    """A nested idempotent call: its key may be held by somebody else."""
    return reference


@shared_task(name="tests.outer_drop", acks_late=True, reject_on_worker_lost=True, max_retries=0)
@idempotent_task(key=lambda reference: f"outer-{reference}", on_in_progress="drop")
def outer_drop(reference: str) -> str:
    """A "drop" task whose body calls ``inner_call``: an inner refusal must fail it, not drop it."""
    _write(f"outer:{reference}", 1)
    return inner_call(reference)


# The consumers' Celery preset under a real worker (tests/test_consumer_contract_celery.py):
# tests/consumer_harness.py's handler and trace, the verdicts traced as its consumers do.

#: Past Celery's own default ``max_retries`` (3): the policy, not Celery, bounds the tries.
CONSUMER_POLICY = GiveUp(max_attempts=5, backoff=0.05, backoff_cap=0.2, unavailable_delay=0.2)


@shared_task(bind=True, name="tests.consume_event", acks_late=True, reject_on_worker_lost=True)
def consume_event(self: Task[Any, Any], event: dict[str, Any]) -> Any:
    """One event through ``consumers.celery.handle``: ``delivered ID`` first, then the
    handler's steps (``ran``, ``committed``) and the verdict (``ack``, ``retry``,
    ``dead_letter``). Task options as the preset's docs say; ``max_retries`` Celery's own."""
    from celery.exceptions import Reject, Retry

    from idempotency_django.consumers import celery as preset
    from tests import consumer_harness as harness

    event_id = str(event["id"])
    harness.trace("delivered", event_id)
    try:
        result = preset.handle(
            self, event_id, functools.partial(_consumed, event), policy=CONSUMER_POLICY
        )
    except Retry:
        harness.trace("retry", event_id)
        raise
    except Reject:
        harness.trace("dead_letter", event_id)
        raise
    harness.trace("ack", event_id)
    return result


def _consumed(event: dict[str, Any]) -> Any:
    """The harness's handler; ``hold`` keeps its first run inside the claim's transaction
    (its row written, uncommitted): "until_killed" until the test SIGKILLs the process
    (``pid-ID`` tells it which), "until_raced" until the event's other delivery started."""
    from tests import consumer_harness as harness

    result = harness.charge(json.dumps(event).encode())
    event_id = str(event["id"])
    if event.get("hold") == "until_killed" and not _marker(f"killed-{event_id}").exists():
        _marker(f"pid-{event_id}").write_text(str(os.getpid()))
        _wait(lambda: False, "the SIGKILL")
    elif event.get("hold") == "until_raced":
        traces = _traces()
        assert traces is not None
        _wait(lambda: harness.steps(traces, "delivered", event_id) >= 2, "the other delivery")
    return result
