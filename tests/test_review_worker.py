"""Tasks on a real worker and broker (0.2.0 review, items 4 and 10)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from django.db import connection

from idempotency_django.calls import idempotent_call
from tests import celery_harness
from tests.helpers import charges
from tests.system.harness import TcpProxy

pytestmark = [
    pytest.mark.requires_postgres,
    pytest.mark.system,
    pytest.mark.django_db(transaction=True),
]


def _settled(worker: celery_harness.Worker, task_id: str) -> bool:
    return any(
        worker.finished(task_id, state) for state in ("SUCCESS", "FAILURE", "IGNORED", "REJECTED")
    )


def test_item4_a_drop_task_whose_inner_call_is_busy_fails_instead_of_vanishing(
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


def test_item10_a_database_outage_sends_the_delivery_again(tmp_path: Path) -> None:
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
