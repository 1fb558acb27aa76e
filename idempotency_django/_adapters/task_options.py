"""The options of ``idempotent_task``, checked once when it is applied: shared by the
Celery adapter (:mod:`.celery`) and the ``django.tasks`` one (:mod:`.django_tasks`)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final

from idempotency_django._conf import MAX_WAIT, bounded
from idempotency_django._protocol.options import check_options

if TYPE_CHECKING:
    from idempotency_django._storage.serializers import Serializer

ON_IN_PROGRESS: Final = ("retry", "drop", "raise")
KeyOf = Callable[..., "str | None"]
TenantOf = Callable[..., str]


class TaskPolicy:
    """What ``@idempotent_task(...)`` was given: wrong values raise when decorating."""

    def __init__(
        self,
        *,
        key: KeyOf | None = None,
        tenant: TenantOf | None = None,
        on_in_progress: str = "retry",
        countdown: float | None = None,
        ttl: float | timedelta | None = None,
        database: str | None = None,
        protocol: str | None = None,
        wait: float | timedelta | None = None,
        serializer: Serializer | None = None,
        max_attempts: int | None = None,
    ) -> None:
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
        self.call_options: dict[str, Any] = {
            "ttl": ttl,
            "database": database,
            "protocol": protocol,
            "wait": wait,
            "serializer": serializer,
        }

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
