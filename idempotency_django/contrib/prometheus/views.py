"""``/metrics``: the registry in Prometheus' text format."""

from __future__ import annotations

import os

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_safe
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

#: Collectors that read shared state at scrape time (the outbox's gauges): the
#: multiprocess merge holds only the workers' files, so they are added to it too.
SCRAPE_TIME: list[Collector] = []


def add_scrape_time_collector(collector: Collector) -> None:
    """Have ``/metrics`` show ``collector`` under multiprocess mode too (once)."""
    if collector not in SCRAPE_TIME:
        SCRAPE_TIME.append(collector)


@require_safe
def metrics(request: HttpRequest) -> HttpResponse:
    """Every metric of the default registry (or, under multiprocess mode, of all workers).

    It exposes counters, never keys or tenants; still, route it where only your
    Prometheus can reach it (an internal port, an allowlist, or a login in front).
    """
    return HttpResponse(generate_latest(registry()), content_type=CONTENT_TYPE_LATEST)


def registry() -> CollectorRegistry:
    """The default registry, or a merge of every process's files when
    ``PROMETHEUS_MULTIPROC_DIR`` is set (gunicorn with several workers)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        merged = CollectorRegistry()
        MultiProcessCollector(merged)  # type: ignore[no-untyped-call]
        for collector in SCRAPE_TIME:
            merged.register(collector)
        return merged
    return REGISTRY


__all__ = ["metrics"]
