"""``idempotency_django.django_tasks.idempotent_task`` on the ImmediateBackend (in process)."""

from __future__ import annotations

import subprocess
import sys
import threading
from typing import Any

import pytest

from idempotency_django import idempotent_call
from idempotency_django.django_tasks import KEY_ARGUMENT, idempotent_task
from idempotency_django.exceptions import KeyReused, RequestInProgress
from idempotency_django.models import IdempotencyEntry
from tests import dj_tasks
from tests.dj_tasks import TaskContext
from tests.testapp.models import Charge

pytestmark = [pytest.mark.versions, pytest.mark.django_db(transaction=True)]


def charges(reference: str) -> int:
    return Charge.objects.filter(reference=reference).count()


def test_a_business_key_runs_once_and_the_duplicate_returns_the_stored_result() -> None:
    first = dj_tasks.immediate_by_key.enqueue("r1")
    again = dj_tasks.immediate_by_key.enqueue("r1")
    assert first.status == again.status == "SUCCESSFUL"
    assert again.return_value == first.return_value
    assert first.return_value["amount"] == 100
    assert charges("r1") == 1


def test_the_same_result_delivered_twice_runs_once() -> None:
    # A redelivery of one result (what a database backend's re-run is) keeps its id.
    result = dj_tasks.immediate_by_result_id.enqueue("r2")
    again = dj_tasks.immediate_by_result_id.call(TaskContext(task_result=result), "r2")  # type: ignore[arg-type]
    assert again == result.return_value
    assert charges("r2") == 1
    (entry,) = IdempotencyEntry.objects.all()
    assert entry.key == f"tests.dj_tasks.immediate_by_result_id\x1f{result.id}"


def test_two_enqueues_are_two_results_when_keyed_by_result_id() -> None:
    # No business key: each enqueue is a new task (the outbox carries one key instead).
    dj_tasks.immediate_by_result_id.enqueue("r3")
    dj_tasks.immediate_by_result_id.enqueue("r3")
    assert charges("r3") == 2


def test_a_carried_key_deduplicates_and_never_reaches_the_function() -> None:
    for _ in range(2):
        result = dj_tasks.immediate_by_result_id.enqueue("r4", **{KEY_ARGUMENT: "outbox-1"})  # type: ignore[arg-type]
        assert result.status == "SUCCESSFUL", result.errors
    assert charges("r4") == 1
    assert IdempotencyEntry.objects.get().key.endswith("\x1foutbox-1")


def test_other_arguments_under_one_key_fail_the_task_with_nothing_run() -> None:
    dj_tasks.immediate_by_key.enqueue("r5", 100)
    refused = dj_tasks.immediate_by_key.enqueue("r5", 200)
    assert refused.status == "FAILED"
    assert refused.errors[0].exception_class is KeyReused
    assert charges("r5") == 1


def test_a_failing_body_stores_nothing_and_the_next_delivery_runs() -> None:
    @idempotent_task(key=lambda n: f"n{n}")
    def flaky(n: int) -> int:
        Charge.objects.create(reference="r6", amount=n)
        if not Charge.objects.filter(reference="r6-ok").exists():
            raise RuntimeError("first try fails")
        return n

    with pytest.raises(RuntimeError):
        flaky(1)
    assert charges("r6") == 0
    Charge.objects.create(reference="r6-ok", amount=0)
    assert flaky(1) == 1
    assert flaky(1) == 1
    assert charges("r6") == 1


def test_decorating_without_a_key_or_a_context_is_refused() -> None:
    with pytest.raises(TypeError, match="takes_context=True"):

        @idempotent_task
        def no_key(order_id: int) -> None: ...

    with pytest.raises(TypeError, match="between the task decorator"):
        idempotent_task(dj_tasks.plain)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="callable"):
        idempotent_task(key="fixed")  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="on_in_progress"):
        idempotent_task(key=str, on_in_progress="wait")  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="countdown"):
        idempotent_task(key=str, countdown=-1)
    with pytest.raises(ValueError, match="ttl"):
        idempotent_task(key=str, ttl=0)
    with pytest.raises(TypeError, match="async def"):

        @idempotent_task(key=str)
        async def coroutine(order_id: int) -> None: ...


def test_a_key_that_is_not_a_str_fails_loudly() -> None:
    @idempotent_task(key=lambda n: None)
    def keyless(n: int) -> int:
        return n

    with pytest.raises(ValueError, match="non-empty str"):
        keyless(1)


def test_a_context_task_called_without_its_context_fails_loudly() -> None:
    with pytest.raises(TypeError, match="takes_context"):
        dj_tasks.immediate_by_result_id.func(None, "r7")
    assert charges("r7") == 0


def test_tenant_separates_key_spaces() -> None:
    @idempotent_task(key=lambda who, n: "same", tenant=lambda who, n: who)
    def per_tenant(who: str, n: int) -> str:
        Charge.objects.create(reference="r8", amount=n)
        return who

    assert per_tenant("a", 1) == "a"
    assert per_tenant("b", 1) == "b"
    assert per_tenant("a", 1) == "a"
    assert charges("r8") == 2


class Holder:
    """Holds ``key`` of ``scope`` in another thread until released."""

    def __init__(self, scope: str, key: str, arguments: Any = None) -> None:
        self.held, self.release = threading.Event(), threading.Event()
        arguments = {"reference": key} if arguments is None else arguments
        self.thread = threading.Thread(target=self.hold, args=(scope, key, arguments))

    def hold(self, scope: str, key: str, arguments: Any) -> None:
        from django.db import connections

        try:
            with idempotent_call(key, scope=scope, arguments=arguments) as call:
                self.held.set()
                assert self.release.wait(60)
                call.result = {"held": True}
        finally:
            connections.close_all()

    def __enter__(self) -> Holder:
        self.thread.start()
        assert self.held.wait(30)
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.thread.join(60)


@pytest.mark.parametrize(
    ("name", "status", "error"),
    [
        ("immediate_drop", "SUCCESSFUL", None),
        ("immediate_raise", "FAILED", RequestInProgress),
        # The ImmediateBackend cannot defer a task: "retry" raises (else it would recurse).
        ("immediate_retry", "FAILED", RequestInProgress),
    ],
)
def test_a_duplicate_in_flight_follows_its_policy(name: str, status: str, error: Any) -> None:
    job = getattr(dj_tasks, name)
    with Holder(f"tests.dj_tasks.{name}", f"held-{name}"):
        result = job.enqueue(f"held-{name}")
    assert result.status == status
    if error is None:
        assert result.return_value is None
    else:
        assert result.errors[0].exception_class is error
    assert charges(f"held-{name}") == 0


def test_without_django_tasks_nor_the_backport_the_import_names_the_extra() -> None:
    code = (
        "import sys\n"
        "sys.modules['django.tasks'] = sys.modules['django_tasks'] = None\n"
        "import django; from django.conf import settings\n"
        "settings.configure(INSTALLED_APPS=['idempotency_django'], DATABASES={})\n"
        "django.setup()\n"
        "try:\n"
        "    import idempotency_django.django_tasks\n"
        "except ModuleNotFoundError as error:\n"
        "    print(error.name, error, sep='|')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    name, message = result.stdout.strip().split("|")
    assert name == "django_tasks", result.stderr
    assert message.endswith("pip install 'idempotency-django[tasks]'")


# On SQLite the holder's open transaction holds the one write lock the enqueue needs.
@pytest.mark.requires_postgres
def test_retry_on_a_backend_that_defers_enqueues_the_call_again_carrying_its_key() -> None:
    from django_tasks_db.models import DBTaskResult

    arguments = {"reference": "held", "amount": 100}
    holder = Holder("tests.dj_tasks.db_by_key", "charge-held", arguments)
    with holder, pytest.raises(RequestInProgress):
        dj_tasks.db_by_key.call("held")
    (again,) = DBTaskResult.objects.all()
    assert again.status == "READY"
    assert again.args_kwargs == {"args": ["held"], "kwargs": {KEY_ARGUMENT: "charge-held"}}
    assert again.run_after > again.enqueued_at
    assert charges("held") == 0


def test_retry_without_a_task_to_enqueue_again_raises() -> None:
    @idempotent_task(key=lambda reference: reference)
    def not_a_task(reference: str) -> None:
        Charge.objects.create(reference=reference, amount=1)

    scope = f"{__name__}.{not_a_task.__qualname__}"
    with Holder(scope, "local"), pytest.raises(RequestInProgress):
        not_a_task("local")
    assert charges("local") == 0
