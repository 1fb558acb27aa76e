"""``@idempotent_task`` for Django's Tasks framework (``django.tasks``, or the ``django_tasks`` backport).

A thin adapter over :func:`idempotency_django.calls.idempotent_call`, placed
between the task decorator and the function::

    @task(takes_context=True)
    @idempotent_task
    def charge(context, order_id): ...

    @task()
    @idempotent_task(key=lambda order_id: f"order-{order_id}")
    def refund(order_id): ...

The key is, in this order: ``key=`` (a callable of the task's arguments), the
key an outbox delivery carries (the keyword argument :data:`KEY_ARGUMENT`, which
the wrapper removes before the function sees it: ``django.tasks`` has no message
headers), else the task result's id, which only a ``takes_context=True`` task
can see. A function without a ``context`` parameter must pass ``key=``: that is
refused when decorating. The scope is the function's dotted path, the tenant
``""`` (or ``tenant=``); the arguments are fingerprinted.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final, TypeVar, Unpack, overload

from django.utils import timezone
from django.utils.module_loading import import_string

from idempotency_django._adapters.extras import raise_missing_extra
from idempotency_django._adapters.task_options import TaskOptions, TaskPolicy, applied
from idempotency_django._conf import conf
from idempotency_django._protocol.fingerprint import bound_arguments, signature_of
from idempotency_django.calls import idempotent_call
from idempotency_django.consumers.classify import handler_errors
from idempotency_django.exceptions import RequestInProgress

if TYPE_CHECKING:
    from django.tasks import Task, TaskContext

else:
    try:  # Django >= 6.0
        from django.tasks import Task, TaskContext
    except ModuleNotFoundError:
        try:  # Django 5.2 and the backport
            from django_tasks import TaskContext
            from django_tasks.base import Task
        except ModuleNotFoundError as error:  # pragma: no cover  (tested in a subprocess)
            raise_missing_extra(error, __name__, "tasks")

__all__ = ["KEY_ARGUMENT", "idempotent_task"]

logger = logging.getLogger("idempotency_django")
TaskFunc = TypeVar("TaskFunc", bound=Callable[..., Any])
#: The keyword argument carrying an outbox row's key to the task (removed before the call).
KEY_ARGUMENT: Final = "_idempotency_key"
#: Set on the wrapper: the outbox only sends keys to functions that strip them.
MARKER: Final = "__idempotent_task__"
BACKOFF_CAP: Final = 60.0


@overload
def idempotent_task(fn: TaskFunc, /) -> TaskFunc: ...


@overload
def idempotent_task(**options: Unpack[TaskOptions]) -> Callable[[TaskFunc], TaskFunc]: ...


def idempotent_task(fn: Any = None, /, **options: Unpack[TaskOptions]) -> Any:
    """Run the task body at most once per key: ``@idempotent_task`` or ``@idempotent_task(...)``.

    ``on_in_progress`` says what a delivery does while another holds the key:
    ``"retry"`` (the default: the same call is enqueued again, carrying its key,
    ``countdown`` seconds later or backing off, and this result fails with
    :class:`~idempotency_django.exceptions.RequestInProgress`; on a backend that
    cannot defer a task this is ``"raise"``), ``"drop"`` (returns ``None``,
    nothing stored; the effect is lost if the holder dies) or ``"raise"``.
    """
    return applied(fn, options, _decorate, Task, "@task(...)")


def _decorate(fn: TaskFunc, *, policy: TaskPolicy) -> TaskFunc:
    if inspect.iscoroutinefunction(fn):
        # Its awaited ORM calls would run on other connections, outside the claim's
        # transaction: the writes and the stored result would not commit together.
        raise TypeError(
            f"@idempotent_task on {fn.__qualname__}: an async def task cannot join the "
            "claim's transaction; write it as a def (the worker runs it in a thread)."
        )
    shape = signature_of(fn)
    takes_context = shape is not None and next(iter(shape.parameters), None) == "context"
    if policy.key is None and not takes_context:
        raise TypeError(
            f"@idempotent_task on {fn.__qualname__}: without @task(takes_context=True) (and a "
            "first parameter named context) the task cannot see its result id; pass "
            "key=lambda ...: ... to key it by its arguments."
        )
    scope = f"{fn.__module__}.{fn.__qualname__}"

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        carried = kwargs.pop(KEY_ARGUMENT, None)
        context = args[0] if takes_context and args else None
        call_args = args[1:] if takes_context else args
        key = _key(policy, context, carried, call_args, kwargs)
        tenant = policy.tenant(*call_args, **kwargs) if policy.tenant else ""
        arguments = bound_arguments(shape, args, kwargs, skip_first=takes_context)
        try:
            with idempotent_call(
                key, scope=scope, tenant=tenant, arguments=arguments, origin="task",
                **policy.call_options,
            ) as call:  # fmt: skip
                if call.replayed:
                    logger.info("idempotent task %s [%s] replayed its stored result", scope, key)
                else:
                    with handler_errors():  # its own database errors count (max_attempts)
                        call.result = fn(*args, **kwargs)
                    policy.succeeded(scope, key, tenant)
            return call.result
        except RequestInProgress as exc:
            return _in_progress(_task(context, scope), exc, policy, key, (call_args, kwargs))
        except Exception as exc:
            # Given up (max_attempts): logged and signalled as a dead letter; the task
            # fails as it would (django.tasks has no dead-letter queue of its own).
            policy.gives_up(exc, scope, key, tenant)
            raise

    setattr(run, MARKER, True)
    return run  # type: ignore[return-value]


def _key(
    policy: TaskPolicy,
    context: object,
    carried: object,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> str:
    key: object
    if policy.key is not None:
        key = policy.key(*args, **kwargs)
    elif carried is not None:
        key = carried
    elif isinstance(context, TaskContext):
        key = str(context.task_result.id)
    else:
        raise TypeError(
            "an @idempotent_task keyed by its result id must run as a task with "
            "@task(takes_context=True), its first argument the TaskContext."
        )
    if not isinstance(key, str) or not key:
        # Running the body unprotected would hide the bug.
        raise ValueError(f"idempotent_task: the key must be a non-empty str, got {key!r}.")
    return key


def _task(context: object, scope: str) -> Task[Any, Any] | None:
    if isinstance(context, TaskContext):
        return context.task_result.task
    # Without a context, the task is what @task() made of this function at its path.
    try:
        found = import_string(scope)
    except ImportError:
        return None
    return found if isinstance(found, Task) else None


def _in_progress(
    task: Task[Any, Any] | None,
    exc: RequestInProgress,
    policy: TaskPolicy,
    key: str,
    call: tuple[tuple[Any, ...], dict[str, Any]],
) -> Any:
    if policy.on_in_progress == "drop":
        logger.info("idempotent task [%s] dropped: in progress", key)
        return None
    if policy.on_in_progress == "raise" or task is None or not task.get_backend().supports_defer:
        raise exc
    # No retry API in django.tasks: the same call again, later, carrying its key.
    countdown = policy.countdown if policy.countdown is not None else _backoff(exc)
    args, kwargs = call
    again = task.using(run_after=timezone.now() + timedelta(seconds=countdown))
    result = again.enqueue(*args, **{**kwargs, KEY_ARGUMENT: key})
    logger.info("idempotent task [%s] in progress elsewhere: enqueued again as %s", key, result.id)
    raise exc


def _backoff(exc: RequestInProgress) -> float:
    # As the Celery adapter: from the holder's Retry-After, capped by one lease.
    cap = min(BACKOFF_CAP, conf.LEASE.total_seconds())
    return min(cap, float(max(exc.retry_after, 1)))
