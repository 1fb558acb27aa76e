"""The receipt as a ``django.tasks`` task (``SAMPLE_TASKS=django``): the Celery one's twin."""

from __future__ import annotations

from typing import Any

import django

from idempotency_django.django_tasks import idempotent_task
from sample_project.payments.tasks import mail_receipt

if django.VERSION >= (6, 0):
    from django.tasks import task
else:  # the django-tasks backport (pip install 'idempotency-django[tasks]')
    from django_tasks import task  # type: ignore[no-redef]


@task(takes_context=True)
@idempotent_task
def receipt(context: Any, charge_id: int) -> dict[str, Any]:
    """Once per outbox key (carried as an argument), however often it is delivered."""
    return mail_receipt(charge_id)
