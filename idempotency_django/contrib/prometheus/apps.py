from __future__ import annotations

from django.apps import AppConfig


class PrometheusConfig(AppConfig):
    name = "idempotency_django.contrib.prometheus"
    label = "idempotency_prometheus"
    verbose_name = "Idempotency: Prometheus metrics"

    def ready(self) -> None:
        from idempotency_django.contrib.prometheus import collectors, metrics

        metrics.connect()
        collectors.register()
