"""The outbox's own ``check --deploy`` warning, registered by its app config."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Tags, register

from idempotency_django._operations.deploy_checks import scheduled, warning

RELAY_TASK = "idempotency_django.outbox.tasks.relay_outbox"


def check_relay_scheduled(relay: bool | None) -> list[CheckMessage]:
    if relay is not False:
        return []
    return warning(
        "W085",
        "Nothing schedules the outbox relay: a row the after-commit fast path missed (the "
        "worker died, the broker was down) is never published.",
        f"Add {RELAY_TASK} to CELERY_BEAT_SCHEDULE, or run `manage.py relay_outbox --every N` "
        'as a service and add "idempotency_django.W085" to SILENCED_SYSTEM_CHECKS.',
        "outbox#check-w085",
    )


@register(Tags.compatibility, deploy=True)
def check_outbox_deployment(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    return check_relay_scheduled(scheduled(RELAY_TASK))
