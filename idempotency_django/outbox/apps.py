from __future__ import annotations

from django.apps import AppConfig


class OutboxConfig(AppConfig):
    """The optional transactional outbox: add ``"idempotency_django.outbox"`` to INSTALLED_APPS."""

    name = "idempotency_django.outbox"
    label = "idempotency_outbox"
    verbose_name = "Idempotency outbox"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.apps import apps

        if apps.is_installed("idempotency_django.contrib.prometheus"):
            from idempotency_django.outbox import prometheus

            prometheus.register()
