from __future__ import annotations

from django.apps import AppConfig


class ConsumersConfig(AppConfig):
    """Message consumers: add ``"idempotency_django.consumers"`` to INSTALLED_APPS for the
    durable count of a message's failures (:class:`~.models.ConsumerFailure`)."""

    name = "idempotency_django.consumers"
    label = "idempotency_consumers"
    verbose_name = "Idempotency consumers"
    default_auto_field = "django.db.models.BigAutoField"
