"""``@idempotent_task``: a Celery task whose effects commit once per key.

A thin adapter over :func:`idempotency_django.calls.idempotent_call` (this
module, and only it, imports Celery)::

    @app.task(acks_late=True, reject_on_worker_lost=True)
    @idempotent_task
    def charge(order_id): ...

The key defaults to the task id, which survives ``self.retry()`` and broker
redelivery (a producer that publishes again gets a new id: pass a business key
with ``key=`` or ``apply_async(task_id=...)``). The scope is the task's name,
the tenant ``""`` (or ``tenant=``), and the arguments are fingerprinted.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar, Unpack, overload

from idempotency_django._adapters.extras import raise_missing_extra

try:
    from celery import Task, current_task
    from celery.exceptions import Ignore, Reject, Retry
except ModuleNotFoundError as error:  # pragma: no cover  (tested in a subprocess)
    raise_missing_extra(error, __name__, "celery")

from idempotency_django._adapters.task_options import TaskOptions, TaskPolicy, applied
from idempotency_django._conf import conf
from idempotency_django._protocol.fingerprint import bound_arguments, signature_of
from idempotency_django.exceptions import RequestInProgress, StoreUnavailable

if TYPE_CHECKING:
    pass

__all__ = ["idempotent_task"]

logger = logging.getLogger("idempotency_django")
TaskFunc = TypeVar("TaskFunc", bound=Callable[..., Any])
#: The message header counting a delivery's waits for a held key (its backoff).
WAITS_HEADER: Final = "idempotency_waits"
BACKOFF_CAP: Final = 60.0


@overload
def idempotent_task(fn: TaskFunc, /) -> TaskFunc: ...


@overload
def idempotent_task(**options: Unpack[TaskOptions]) -> Callable[[TaskFunc], TaskFunc]: ...


def idempotent_task(fn: Any = None, /, **options: Unpack[TaskOptions]) -> Any:
    """Run the task body at most once per key: ``@idempotent_task`` or ``@idempotent_task(...)``.

    Place it between Celery's task decorator and the function. ``key`` and
    ``tenant`` are callables of the task's arguments (without ``self``);
    ``on_in_progress`` says what a delivery does while another holds the key:
    ``"retry"`` (sent again after ``countdown``, else backing off, until the
    holder finishes or is taken over: not bounded by ``max_retries``),
    ``"drop"`` (ignored: no result is stored for it; the effect is lost if the
    holder dies) or ``"raise"``
    (:class:`~idempotency_django.exceptions.RequestInProgress`).
    """
    return applied(fn, options, _decorate, Task, "@app.task(...)")


def _decorate(fn: TaskFunc, *, policy: TaskPolicy) -> TaskFunc:
    shape = signature_of(fn)

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        task = _running_task(args)
        bound = bool(args) and args[0] is task
        call_args = args[1:] if bound else args
        if policy.key is None and task.request.id is None:
            # Called directly (``charge(1)``), not delivered: nothing to deduplicate.
            return fn(*args, **kwargs)
        key = policy.key(*call_args, **kwargs) if policy.key else task.request.id
        if key is None:
            # Running the body unprotected would hide the bug.
            raise ValueError(f"{task.name}: idempotent_task(key=...) must return a non-empty str.")
        arguments = bound_arguments(shape, args, kwargs, skip_first=bound)
        try:
            return _run_once(fn, task, key, policy, args, kwargs, call_args, arguments)
        except RequestInProgress as exc:
            return _in_progress(task, exc, policy)
        except StoreUnavailable as exc:
            raise _store_unavailable(task, exc) from exc
        except (Ignore, Reject):
            raise
        except Exception as exc:
            tenant = policy.tenant(*call_args, **kwargs) if policy.tenant else ""
            if policy.gives_up(exc, task.name, key, tenant):
                # Dead-lettered: never requeued (RabbitMQ routes it to the queue's
                # dead-letter exchange, if it has one); the task's state is FAILURE.
                raise Reject(exc, requeue=False) from exc
            raise

    return run  # type: ignore[return-value]


def _running_task(args: tuple[Any, ...]) -> Task[Any, Any]:
    # bind=True passes the task first; otherwise Celery keeps it on its stack.
    if args and isinstance(args[0], Task):
        return args[0]
    task = current_task._get_current_object() if current_task else None  # type: ignore[attr-defined]
    if task is None:
        raise RuntimeError("an @idempotent_task function must run as a Celery task.")
    return task  # type: ignore[no-any-return]


def _run_once(
    fn: Callable[..., Any],
    task: Task[Any, Any],
    key: str,
    policy: TaskPolicy,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    call_args: tuple[Any, ...],
    arguments: object,
) -> Any:
    from idempotency_django.calls import idempotent_call
    from idempotency_django.consumers.classify import handler_errors

    tenant = policy.tenant(*call_args, **kwargs) if policy.tenant else ""
    with idempotent_call(
        key,
        scope=task.name,
        tenant=tenant,
        arguments=arguments,
        origin="task",
        **policy.call_options,
    ) as call:
        if call.replayed:
            # Never the key: the outcome's own log line carries its keyed digest.
            logger.debug("idempotent task %s replayed its stored result", task.name)
            return call.result
        with handler_errors():  # its own database errors count toward max_attempts
            call.result = fn(*args, **kwargs)
        policy.succeeded(task.name, key, tenant)
        return call.result


def _in_progress(task: Task[Any, Any], exc: RequestInProgress, policy: TaskPolicy) -> Any:
    if policy.on_in_progress == "raise":
        raise exc
    if policy.on_in_progress == "drop":
        # Ignore, not a return: a returned None would overwrite the holder's result.
        # Never the key (nor the task id, the default key): the in-progress outcome's
        # log line carries its keyed digest.
        logger.info("idempotent task %s dropped a delivery: its key is in progress", task.name)
        raise Ignore()
    request = task.request
    waits = _waits(request)
    countdown = _backoff(exc, waits) if policy.countdown is None else policy.countdown
    if request.called_directly or request.is_eager:
        # Called as a function, retry() re-raises exc; under apply() it retries at
        # once, recursing, with no broker to wait on: Celery's max_retries bounds it.
        raise task.retry(countdown=countdown, exc=exc)
    raise _wait_for_holder(task, exc, countdown, waits)


def _store_unavailable(task: Task[Any, Any], exc: StoreUnavailable) -> Exception:
    """The database was unreachable when claiming: nothing ran, so the delivery waits and
    comes again (as for a held key, whatever ``on_in_progress`` says) instead of failing."""
    request = task.request
    if request.called_directly or request.is_eager:
        return exc
    waits = _waits(request)
    cap = min(BACKOFF_CAP, conf.LEASE.total_seconds())
    countdown = min(cap, max(float(exc.headers()["Retry-After"]), 2.0 ** min(waits, 16)))
    return _wait_for_holder(task, exc, countdown, waits)


def _waits(request: Any) -> int:
    """How many times this message has already met its key held (a header of ours)."""
    return int((request.headers or {}).get(WAITS_HEADER, 0))


def _backoff(exc: RequestInProgress, waits: int) -> float:
    # Exponential from the holder's Retry-After, capped: a dead lease frees the
    # key within IDEMPOTENCY_LEASE, so never wait longer than one lease.
    cap = min(BACKOFF_CAP, conf.LEASE.total_seconds())
    return min(cap, max(exc.retry_after, 2.0 ** min(waits, 16)))


def _wait_for_holder(
    task: Task[Any, Any], exc: RequestInProgress | StoreUnavailable, countdown: float, waits: int
) -> Retry:
    """``task.retry()`` that neither counts against ``max_retries`` nor spends ``retries``.

    A held key is not the body failing: the holder may be a dead worker's lease
    (up to ``IDEMPOTENCY_LEASE``) or a lost host's transaction (up to
    ``IDEMPOTENCY_IDLE_TIMEOUT``), and giving up would lose the effect. So the
    message is sent again, as ``retry()`` does, with the same ``retries`` and a
    header counting the waits instead.
    """
    request = task.request
    # As retry() sends them: without the broker's x-death records (dead-letter cycles).
    kept = request.as_execution_options().get("headers") or {}
    headers = {**kept, WAITS_HEADER: waits + 1}
    again = task.signature_from_request(
        request, countdown=countdown, retries=request.retries, headers=headers
    )
    try:
        again.apply_async()
    except Exception as error:
        # Under acks_late this delivery is the only copy left: back to the broker
        # rather than dropped as retry() would (without acks_late it is acked already).
        raise Reject(error, requeue=True) from error
    # The stubs type ``when`` as numbers.Real, which no float satisfies for mypy.
    return Retry(exc=exc, when=countdown, sig=again)  # type: ignore[arg-type]
