from __future__ import annotations

from django.apps import AppConfig


class ConsumersConfig(AppConfig):
    """Message consumers: add ``"idempotency_django.consumers"`` to INSTALLED_APPS for the
    durable count of a message's failures (:class:`~.models.ConsumerFailure`)."""

    name = "idempotency_django.consumers"
    label = "idempotency_consumers"
    verbose_name = "Idempotency consumers"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from idempotency_django import purge

        purge.register_step("consumer failure counts", _purge_counts)


def _purge_counts(alias: str, batch_size: int) -> int:
    """Counts of messages not seen again for IDEMPOTENCY_TTL go with the entries' purge
    (a broker that dropped a failing message never comes back to clear its count)."""
    from idempotency_django.consumers.failures import purge_stale

    return purge_stale(alias, batch_size)
