"""``enqueue()``: record a task to publish once the current transaction commits."""

from __future__ import annotations

import secrets
from datetime import timedelta
from typing import Any, Protocol

from django.db import transaction

from idempotency_django.databases import default_alias
from idempotency_django.outbox.errors import OutboxError

#: How long the relay leaves a fresh row to the on_commit fast path.
FAST_PATH_GRACE = timedelta(seconds=10)


class _Named(Protocol):
    @property
    def name(self) -> str: ...


def enqueue(
    task_or_name: _Named | str,
    /,
    *args: Any,
    key: str | None = None,
    request: object = None,
    using: str | None = None,
    options: dict[str, Any] | None = None,
    **kwargs: Any,
) -> str:
    """Record ``task(*args, **kwargs)`` in the current transaction; returns its key.

    The key (the Celery task id of every publish) defaults, inside a protected
    view (found by ``core.current_context()``, or pass ``request=``), to a key
    derived from the request's key, the task's name, its rank among the
    request's enqueues of that task and this execution's identity: distinct per
    enqueue and per execution, the same for every redelivery of one row.
    Elsewhere pass ``key=``. ``options`` are extra ``apply_async`` options (queue, priority, ...);
    for a ``django.tasks`` task (decorated with ``idempotent_task``): ``backend``, ``queue_name``,
    ``priority``, and its key travels as an argument (:mod:`idempotency_django.outbox.backends`);
    arguments and options must be JSON-serialisable. Raises :class:`OutboxError`
    outside ``transaction.atomic()`` on the outbox's database (``using``, default ``IDEMPOTENCY_DATABASE``): without the
    caller's transaction the row could commit without the business rows.
    """
    from idempotency_django.outbox.backends import describe
    from idempotency_django.outbox.delivery import publish_after_commit
    from idempotency_django.outbox.models import OutboxMessage

    name, options = describe(task_or_name, options)
    alias = using or default_alias()
    if not transaction.get_connection(alias).in_atomic_block:
        raise OutboxError(
            f"enqueue({name!r}) must run inside transaction.atomic(using={alias!r}), "
            "in the same transaction as the business writes it belongs to."
        )
    row = OutboxMessage.objects.using(alias).create(
        key=key or _derived_key(name, request),
        task=name,
        args=list(args),
        kwargs=kwargs,
        options=options,
        next_attempt_at=_now_plus(FAST_PATH_GRACE),
    )
    transaction.on_commit(lambda: publish_after_commit(row.pk, alias), using=alias)
    return row.key


def _derived_key(name: str, request: object) -> str:
    from idempotency_django._protocol.core import IdempotencyContext, current_context

    context = getattr(request, "idempotency", None) if request else current_context()
    if not isinstance(context, IdempotencyContext) or context.key is None:
        raise OutboxError(
            f"enqueue({name!r}) needs key=... outside a protected view "
            "(or a request carrying an idempotency key: pass request=...)."
        )
    # One task enqueued twice by one request needs two keys, or the consumer runs
    # it once; and each execution of one key needs its own (the view's entry may
    # have expired and the key run again, while the consumer still holds the last
    # execution's task id). A redelivery reuses the row's key: it stays equal.
    # A retry after a rollback draws a new identity: nothing was published then.
    if context._execution is None:
        context._execution = secrets.token_hex(16)
    context._enqueued[name] += 1
    count = context._enqueued[name]
    return context.derive(f"{name}#{count}\x1f{context._execution}")


def _now_plus(delta: timedelta) -> Any:
    from django.db.models import DateTimeField, ExpressionWrapper
    from django.db.models.functions import Now

    # The database's clock, never this server's: relays on other machines compare with it.
    return ExpressionWrapper(Now() + delta, output_field=DateTimeField())
