"""How an outbox row is published: to Celery, or to a ``django.tasks`` backend.

A Celery row publishes by name with its key as the task id. A ``django.tasks``
row records the task's dotted path and, under ``options["django.tasks"]``, the
backend, queue and priority to enqueue it with; ``django.tasks`` has no task id
to set and no headers, so every enqueue of the row passes its key as the keyword
argument ``_idempotency_key``, which :func:`idempotency_django.django_tasks.idempotent_task`
takes out before calling the function (and uses as the key, unless ``key=``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any, Final

from django.utils.module_loading import import_string

from idempotency_django.outbox.errors import OutboxError

#: The key of ``OutboxMessage.options`` that marks a ``django.tasks`` row.
DJANGO_TASKS: Final = "django.tasks"
_TASK_OPTIONS: Final = frozenset({"backend", "queue_name", "priority"})


def describe(task_or_name: Any, options: dict[str, Any] | None) -> tuple[str, dict[str, Any]]:
    """The row's ``task`` and ``options`` for ``enqueue(task_or_name, ..., options=options)``."""
    if not is_django_task(task_or_name):
        name = task_or_name if isinstance(task_or_name, str) else task_or_name.name
        return name, options or {}
    from idempotency_django.django_tasks import MARKER

    task = task_or_name
    if not getattr(task.func, MARKER, False):
        raise OutboxError(
            f"enqueue({task.module_path!r}): a django.tasks task needs @idempotent_task "
            "(from idempotency_django.django_tasks) under @task(): it takes the delivery's key."
        )
    unknown = set(options or {}) - _TASK_OPTIONS
    if unknown:
        raise OutboxError(
            f"enqueue({task.module_path!r}, options=...) takes {sorted(_TASK_OPTIONS)} for a "
            f"django.tasks task, not {sorted(unknown)}."
        )
    chosen = {"backend": task.backend, "queue_name": task.queue_name, "priority": task.priority}
    return task.module_path, {DJANGO_TASKS: {**chosen, **(options or {})}}


def is_django_task(value: object) -> bool:
    """Whether ``value`` is a ``django.tasks`` (or backport) task; imports neither."""
    return any(isinstance(value, kind) for kind in _task_types())


def _task_types() -> Iterator[type]:
    # A task object exists only once its framework is imported: look, never import.
    for name in ("django.tasks.base", "django_tasks.base"):
        module = sys.modules.get(name)
        if module is not None:
            yield module.Task


def django_tasks_options(row: Any) -> dict[str, Any] | None:
    """A ``django.tasks`` row's backend, queue and priority; ``None`` for a Celery row."""
    chosen = row.options.get(DJANGO_TASKS) if isinstance(row.options, dict) else None
    return chosen if isinstance(chosen, dict) else None


def enqueue_django_task(row: Any, chosen: dict[str, Any]) -> None:
    """Enqueue a ``django.tasks`` row with its backend, its key as an argument (no bound)."""
    from idempotency_django.django_tasks import KEY_ARGUMENT

    # The ImmediateBackend runs it here; a failure becomes its result, not the publish's.
    task = import_string(row.task).using(**chosen)
    task.enqueue(*row.args, **{**row.kwargs, KEY_ARGUMENT: row.key})
