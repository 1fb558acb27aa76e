from __future__ import annotations

from django.apps import AppConfig


class OpenTelemetryConfig(AppConfig):
    name = "idempotency_django.contrib.opentelemetry"
    label = "idempotency_opentelemetry"
    verbose_name = "Idempotency: OpenTelemetry"

    def ready(self) -> None:
        from idempotency_django.contrib.opentelemetry import receivers

        receivers.connect()
