"""The Celery task: called in-process, and sent to a real worker through Redis."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest
from django.db import connection

from idempotency_django.models import IdempotencyEntry
from tests import celery_app
from tests.conftest import reachable, service_missing
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


def _database_url() -> str:
    db = connection.settings_dict
    auth = quote(db["USER"] or "", safe="")
    if db["PASSWORD"]:
        auth += ":" + quote(db["PASSWORD"], safe="")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A real ``celery worker`` on the test database; killed whatever happens."""
    broker = urlsplit(celery_app.BROKER_URL)
    if not reachable(broker.hostname or "127.0.0.1", broker.port or 6379):
        service_missing(f"Redis broker at {celery_app.BROKER_URL} is unreachable")
    celery_app.app.control.purge()  # messages a killed run may have left
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": _database_url(),
        "IDEMPOTENCY_TEST_CELERY_URL": celery_app.BROKER_URL,
    }
    command = [
        *(sys.executable, "-m", "celery", "-A", "tests.celery_app", "worker"),
        *("--pool=solo", "--without-gossip", "--without-mingle", "--without-heartbeat"),
        *("-Q", celery_app.QUEUE, "--loglevel=WARNING"),
    ]
    log = (tmp_path / "worker.log").open("wb")
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        log.close()


@pytest.mark.requires_postgres
@pytest.mark.system
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_runs_the_task(worker: subprocess.Popen[bytes], tmp_path: Path) -> None:
    from idempotency_django.tasks import purge_idempotency

    IdempotencyEntryFactory.create_batch(3, expired=True)
    IdempotencyEntryFactory.create(abandoned=True)
    live = IdempotencyEntryFactory.create()
    celery_app.app.set_current()
    sent = purge_idempotency.delay(batch_size=2)
    try:
        result = sent.get(timeout=25)
    except Exception as exc:
        log = (tmp_path / "worker.log").read_text(errors="replace")
        pytest.fail(f"the worker did not answer ({exc!r}); its log:\n{log}")
    assert result == {"expired": 3, "abandoned": 1}
    assert list(IdempotencyEntry.objects.values_list("pk", flat=True)) == [live.pk]
