"""The options of ``idempotent_task``, checked once when it is applied: shared by the
Celery adapter (:mod:`.celery`) and the ``django.tasks`` one (:mod:`.django_tasks`)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final, Literal, TypedDict, Unpack, get_args

from idempotency_django._conf import MAX_WAIT, bounded
from idempotency_django._protocol.options import check_keywords, check_options

if TYPE_CHECKING:
    from idempotency_django._storage.serializers import Serializer

OnInProgress = Literal["retry", "drop", "raise"]
ON_IN_PROGRESS: Final = get_args(OnInProgress)
KeyOf = Callable[..., "str | None"]
TenantOf = Callable[..., str]


class TaskOptions(TypedDict, total=False):
    """``idempotent_task``'s options (Celery's and ``django.tasks``'): the one declaration."""

    key: KeyOf | None  # a callable of the task's arguments; default: the task's id
    tenant: TenantOf | None  # a callable of the task's arguments; default: ""
    on_in_progress: OnInProgress  # default: "retry"
    countdown: float | None  # seconds before a held key's delivery is sent again
    ttl: float | timedelta | None  # IDEMPOTENCY_TTL
    database: str | None  # IDEMPOTENCY_DATABASE
    protocol: str | None  # IDEMPOTENCY_PROTOCOL
    wait: float | timedelta | None  # IDEMPOTENCY_WAIT
    serializer: Serializer | None  # how the result is stored
    max_attempts: int | None  # failures before a delivery is dead-lettered


TASK_OPTIONS: Final = tuple(TaskOptions.__annotations__)
#: The options passed on to ``idempotent_call`` as they are.
CALL_OPTIONS: Final = ("ttl", "database", "protocol", "wait", "serializer")


def applied(
    fn: Any, options: TaskOptions, decorate: Callable[..., Any], task: type, above: str
) -> Any:
    """``@idempotent_task`` or ``@idempotent_task(...)``, its options checked now: the function
    decorated, or the decorator that will. ``task`` is the framework's task class, made by the
    decorator written ``above``."""
    policy = TaskPolicy(**options)
    if fn is None:
        return functools.partial(decorate, policy=policy)
    if isinstance(fn, task) or not callable(fn):
        raise TypeError(
            "@idempotent_task goes between the task decorator and the function: "
            f"{above} / @idempotent_task / def f(...)."
        )
    return decorate(fn, policy=policy)


class TaskPolicy:
    """What ``@idempotent_task(...)`` was given: wrong values raise when decorating."""

    def __init__(self, **options: Unpack[TaskOptions]) -> None:
        check_keywords("idempotent_task", options, TASK_OPTIONS)
        key, tenant = options.get("key"), options.get("tenant")
        on_in_progress, countdown = options.get("on_in_progress", "retry"), options.get("countdown")
        ttl, wait, protocol = options.get("ttl"), options.get("wait"), options.get("protocol")
        max_attempts = options.get("max_attempts")
        if on_in_progress not in ON_IN_PROGRESS:
            raise ValueError(
                f"on_in_progress must be one of {ON_IN_PROGRESS}, not {on_in_progress!r}."
            )
        for name, value in (("key", key), ("tenant", tenant)):
            if value is not None and not callable(value):
                raise TypeError(
                    f"idempotent_task({name}=...) takes a callable of the task's arguments."
                )
        if countdown is not None:
            try:
                bounded(countdown, MAX_WAIT, zero=True)
            except (TypeError, ValueError):
                raise ValueError(
                    f"idempotent_task(countdown=...) takes seconds from 0 to a day, "
                    f"got {countdown!r}."
                ) from None
        check_options("idempotent_task", ttl=ttl, wait=wait, protocol=protocol)
        if max_attempts is not None and (
            isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1
        ):
            raise ValueError(
                f"idempotent_task(max_attempts=...) takes a positive int, got {max_attempts!r}."
            )
        # Failures after which a delivery is given up on (dead-lettered), counted in the
        # consumers app's table: None leaves retries to the task's own settings.
        self.max_attempts = max_attempts
        self.key, self.tenant = key, tenant
        self.on_in_progress, self.countdown = on_in_progress, countdown
        # What idempotent_call takes.
        self.call_options: dict[str, Any] = {name: options.get(name) for name in CALL_OPTIONS}

    def succeeded(self, scope: str, key: str, tenant: str) -> None:
        """In the body's transaction: forget its failures (``max_attempts``)."""
        if self.max_attempts is not None:
            from idempotency_django.consumers.core import task_succeeded

            task_succeeded(scope=scope, key=key, tenant=tenant, database=self._database)

    def gives_up(self, error: Exception, scope: str, key: str, tenant: str) -> bool:
        """Count the body's failure; whether ``max_attempts`` says to dead-letter it now."""
        if self.max_attempts is None:
            return False
        from idempotency_django.consumers.core import task_failed

        return task_failed(
            error,
            scope=scope,
            key=key,
            tenant=tenant,
            database=self._database,
            max_attempts=self.max_attempts,
        )

    @property
    def _database(self) -> str | None:
        database: str | None = self.call_options["database"]
        return database
