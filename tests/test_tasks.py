"""The Celery task: called in-process, and sent to a real worker through Redis."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from idempotency_django.models import IdempotencyEntry
from tests import celery_harness
from tests.factories import IdempotencyEntryFactory

ROOT = Path(__file__).resolve().parent.parent


def test_importing_the_app_does_not_import_celery() -> None:
    code = (
        "import sys, django; django.setup(); "
        "import idempotency_django, idempotency_django.admin, idempotency_django.purge, "
        "idempotency_django.management.commands.purge_idempotency; "
        "assert 'celery' not in sys.modules, 'celery was imported'"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True, timeout=60)


@pytest.mark.django_db
@pytest.mark.parametrize("dry_run", [False, True])
def test_task_purges_and_returns_the_counts(dry_run: bool) -> None:
    from idempotency_django.tasks import purge_idempotency

    IdempotencyEntryFactory.create_batch(3, expired=True)
    IdempotencyEntryFactory.create(abandoned=True)
    IdempotencyEntryFactory.create()
    result = purge_idempotency.apply(kwargs={"batch_size": 2, "dry_run": dry_run}).get()
    assert result == {"expired": 3, "abandoned": 1}
    assert IdempotencyEntry.objects.count() == (5 if dry_run else 1)


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[celery_harness.Worker]:
    """A real ``celery worker`` on the test database and the Redis broker."""
    with celery_harness.start_worker(tmp_path, "redis", pool="solo") as running:
        yield running


@pytest.mark.requires_server
@pytest.mark.system
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_runs_the_task(worker: celery_harness.Worker) -> None:
    IdempotencyEntryFactory.create_batch(3, expired=True)
    IdempotencyEntryFactory.create(abandoned=True)
    live = IdempotencyEntryFactory.create()
    sent = worker.app.send_task(
        "idempotency_django.tasks.purge_idempotency", kwargs={"batch_size": 2}
    )
    try:
        result = sent.get(timeout=celery_harness.PATIENCE)
    except Exception as exc:
        pytest.fail(f"the worker did not answer ({exc!r}); its log:\n{worker.text()}")
    assert result == {"expired": 3, "abandoned": 1}
    assert list(IdempotencyEntry.objects.values_list("pk", flat=True)) == [live.pk]
