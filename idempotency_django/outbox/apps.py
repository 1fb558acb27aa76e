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

        from idempotency_django import purge
        from idempotency_django._operations import overview
        from idempotency_django.outbox import checks  # noqa: F401  (registers them)
        from idempotency_django.outbox.overview import panel

        purge.register_step("sent outbox rows", _purge_sent)
        overview.register_panel("outbox", panel)

        if apps.is_installed("idempotency_django.contrib.prometheus"):
            from idempotency_django.outbox import prometheus

            prometheus.register()


def _purge_sent(alias: str, batch_size: int) -> int:
    """Sent rows past the TTL go with the entries (the entries' purge runs this step)."""
    from idempotency_django.outbox.delivery import purge_sent

    return purge_sent(using=alias, batch_size=batch_size)
