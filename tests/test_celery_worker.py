"""``idempotent_task`` under a real worker: crashes, redeliveries, retries and storms.

Each test counts, from the worker's traces, the deliveries it saw and the body
runs, and from PostgreSQL the business rows committed: always one.
"""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.db.models.functions import Now

from idempotency_django._protocol.fingerprint import arguments_digest, keyed
from idempotency_django._storage.store import lease
from idempotency_django._storage.store.sql import Claim, Target
from idempotency_django.calls import idempotent_call, namespaced
from idempotency_django.models import IdempotencyEntry
from tests import celery_harness
from tests.helpers import charges
from tests.system.harness import TcpProxy

pytestmark = [
    pytest.mark.requires_postgres,
    pytest.mark.system,
    pytest.mark.django_db(transaction=True),
]
BROKERS = ["redis", "rabbitmq"]


def report(test: str, worker: celery_harness.Worker, task_id: str, reference: str) -> None:
    """One line per test for the closing note: ``-s`` shows them."""
    print(
        f"\nCOUNTS {test}: deliveries seen={worker.deliveries(task_id)} "
        f"body runs={worker.runs(reference)} executions committed={charges(reference)}"
    )


def send(
    worker: celery_harness.Worker, task_id: str, *args: Any, name: str = "tests.charge"
) -> Any:
    return worker.app.send_task(name, args=list(args), task_id=task_id)


def deliver(
    worker: celery_harness.Worker, task_id: str, *args: Any, name: str = "tests.charge"
) -> Any:
    """Send once more under ``task_id`` and return this delivery's result, not an earlier one's."""
    before = worker.finished(task_id)
    send(worker, task_id, *args, name=name)
    worker.wait_for(lambda: worker.finished(task_id) > before, "the delivery's success")
    # Read afresh: the backend caches the first outcome it saw under this id.
    meta = worker.app.backend.get_task_meta(task_id, cache=False)
    assert meta["status"] == "SUCCESS", meta
    return meta["result"]


@pytest.fixture
def names() -> tuple[str, str]:
    unique = uuid.uuid4().hex[:12]
    return f"task-{unique}", f"ref-{unique}"


@pytest.fixture(params=BROKERS)
def any_broker(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[celery_harness.Worker]:
    with celery_harness.start_worker(tmp_path, "redis", concurrency=2) as running:
        yield running


def test_a_worker_child_killed_mid_task_is_redelivered_and_commits_once(
    tmp_path: Path, any_broker: str, names: tuple[str, str]
) -> None:
    task_id, reference = names
    with celery_harness.start_worker(tmp_path, any_broker, concurrency=1) as worker:
        send(worker, task_id, reference, 100, "block_until_killed")
        pid_file = worker.traces / f"pid-{reference}"
        worker.wait_for(pid_file.exists, "the first run to write its row")
        pid = int(pid_file.read_text())
        assert pid in worker.children()
        (worker.traces / f"killed-{reference}").write_text("")
        os.kill(pid, signal.SIGKILL)
        worker.wait_for(lambda: worker.finished(task_id) >= 1, "the redelivery to succeed")
        report(f"sigkill[{any_broker}]", worker, task_id, reference)
        assert worker.deliveries(task_id) == 2
        assert worker.runs(reference) == 2
        assert charges(reference) == 1


def test_a_redelivery_meeting_a_crashed_lease_waits_past_max_retries_and_commits_once(
    worker: celery_harness.Worker, names: tuple[str, str]
) -> None:
    task_id, reference = names
    # What a worker SIGKILLed mid-task leaves under "lease": its committed claim. Its lease
    # ends when the test says so (after two waits), not after some seconds: the count of
    # waits then depends on no machine's speed.
    arguments = {"reference": reference, "amount": 100, "mode": "retry_once"}
    key = namespaced("tests.charge_leased", task_id)
    target = Target(
        "default",
        "",
        key,
        keyed(arguments_digest(arguments)).current,
        timedelta(hours=1),
        timedelta(hours=1),
        None,
    )
    assert isinstance(lease.claim(target, False), Claim)
    send(worker, task_id, reference, 100, "retry_once", name="tests.charge_leased")
    worker.wait_for(lambda: worker.finished(task_id, "RETRY") >= 2, "two waits for the lease")
    assert IdempotencyEntry.objects.filter(key=key).update(locked_until=Now()) == 1
    worker.wait_for(lambda: worker.finished(task_id) >= 1, "the run after the lease passed")
    report("crashed lease", worker, task_id, reference)
    # max_retries=1, yet the waits (1 + 2 s) and the body's own retry all happened.
    assert worker.finished(task_id, "RETRY") >= 3
    assert "Retry in 2.0s" in worker.log.read_text()  # the waits back off across messages
    assert worker.runs(reference) == 2
    assert charges(reference) == 1


def test_a_redelivery_past_the_visibility_timeout_commits_nothing_twice(
    tmp_path: Path, names: tuple[str, str]
) -> None:
    task_id, reference = names
    with celery_harness.start_worker(
        tmp_path, "redis", concurrency=2, visibility_timeout=1
    ) as worker:
        send(worker, task_id, reference, 100, "block_until_redelivered")
        # The first run holds its key until a redelivery has come and gone; then a
        # later one (a retry of that redelivery) must replay, not run.
        worker.wait_for(lambda: worker.finished(task_id) >= 2, "the first run and a replay")
        report("visibility_timeout", worker, task_id, reference)
        assert worker.deliveries(task_id) >= 3
        assert worker.finished(task_id, "RETRY") >= 1
        assert worker.runs(reference) == 1
        assert charges(reference) == 1


def test_self_retry_after_a_partial_write_has_one_effect(
    worker: celery_harness.Worker, names: tuple[str, str]
) -> None:
    task_id, reference = names
    send(worker, task_id, reference, 100, "retry_once")
    worker.wait_for(lambda: worker.finished(task_id) >= 1, "the retried run to succeed")
    report("self.retry", worker, task_id, reference)
    assert worker.finished(task_id, "RETRY") == 1
    assert worker.runs(reference) == 2
    assert charges(reference) == 1


def test_an_exception_frees_the_key_and_a_redelivery_runs_afresh(
    worker: celery_harness.Worker, names: tuple[str, str]
) -> None:
    task_id, reference = names
    send(worker, task_id, reference, 100, "fail_once")
    worker.wait_for(lambda: worker.finished(task_id, "FAILURE") >= 1, "the failure")
    assert charges(reference) == 0
    result = deliver(worker, task_id, reference, 100, "fail_once")
    report("exception", worker, task_id, reference)
    assert result["reference"] == reference
    assert worker.runs(reference) == 2
    assert charges(reference) == 1


def test_a_storm_of_deliveries_of_one_task_id_executes_once(
    tmp_path: Path, any_broker: str, names: tuple[str, str]
) -> None:
    task_id, reference = names
    with celery_harness.start_worker(tmp_path, any_broker, concurrency=4) as worker:
        for _ in range(50):
            send(worker, task_id, reference, 100, "hold")
        worker.wait_for(lambda: worker.finished(task_id) >= 50, "50 answers")
        report(f"storm[{any_broker}]", worker, task_id, reference)
        assert worker.deliveries(task_id) >= 50
        assert worker.runs(reference) == 1
        assert charges(reference) == 1


def test_the_result_round_trips_through_a_replay(
    worker: celery_harness.Worker, names: tuple[str, str]
) -> None:
    task_id, reference = names
    first = deliver(worker, task_id, reference, name="tests.rich_result")
    replayed = deliver(worker, task_id, reference, name="tests.rich_result")
    report("result", worker, task_id, reference)
    assert replayed == first
    assert isinstance(first["uuid"], uuid.UUID)
    assert {type(first[k]).__name__ for k in ("amount", "at", "day")} == {
        "Decimal",
        "datetime",
        "date",
    }
    assert worker.runs(reference) == 1
    assert charges(reference) == 1


def _settled(worker: celery_harness.Worker, task_id: str) -> bool:
    return any(
        worker.finished(task_id, state) for state in ("SUCCESS", "FAILURE", "IGNORED", "REJECTED")
    )


def test_a_drop_task_whose_inner_call_is_busy_fails_instead_of_vanishing(
    tmp_path: Path,
) -> None:
    """0.2.0: the inner RequestInProgress was taken for the task's own key: IGNORED."""
    reference, task_id = f"nest-{uuid.uuid4().hex[:8]}", str(uuid.uuid4())
    with celery_harness.start_worker(tmp_path, "redis") as worker:
        # The inner key in flight elsewhere (its advisory lock held, or its lease running).
        with idempotent_call(f"inner-{reference}", scope="tests.inner") as held:
            worker.app.send_task("tests.outer_drop", args=[reference], task_id=task_id)
            worker.wait_for(lambda: _settled(worker, task_id), "the outer delivery")
            held.result = "held"
        assert worker.finished(task_id, "FAILURE") == 1, worker.lines("finished")
        assert "NestedRefusal" in worker.text()
        assert worker.runs(f"outer:{reference}") == 1
        assert charges(f"outer:{reference}") == 0  # rolled back; the outer key is free again


def test_a_database_outage_sends_the_delivery_again(tmp_path: Path) -> None:
    """0.2.0: StoreUnavailable failed the delivery and acknowledged it: the charge was lost."""
    reference, task_id = f"dbdown-{uuid.uuid4().hex[:8]}", str(uuid.uuid4())
    proxy = TcpProxy(int(connection.settings_dict.get("PORT") or 5432))
    database = celery_harness.database_url().replace(
        f":{connection.settings_dict.get('PORT') or 5432}/", f":{proxy.port}/"
    )
    try:
        proxy.cut()  # the worker's database is unreachable
        with celery_harness.start_worker(tmp_path, "redis", database=database) as worker:
            worker.app.send_task("tests.charge", args=[reference, 5], task_id=task_id)
            worker.wait_for(lambda: worker.deliveries(task_id) >= 1, "the first delivery")
            worker.wait_for(lambda: bool(worker.lines("finished")), "its end")
            proxy.restore()
            worker.wait_for(lambda: _settled(worker, task_id), "the delivery after the outage")
            assert worker.finished(task_id, "SUCCESS") == 1, worker.lines("finished")
            assert worker.deliveries(task_id) >= 2
            assert charges(reference) == 1
    finally:
        proxy.close()
