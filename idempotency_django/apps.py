from __future__ import annotations

from django.apps import AppConfig


class IdempotencyConfig(AppConfig):
    name = "idempotency_django"
    label = "idempotency_django"
    verbose_name = "Idempotency"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from idempotency_django import checks  # noqa: F401  (registers the checks)
