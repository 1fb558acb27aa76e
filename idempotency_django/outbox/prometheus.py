"""The outbox's gauges for Prometheus, read from :func:`~idempotency_django.outbox.stats`
at scrape time (this module imports ``prometheus_client``).

Registered by the outbox app when ``idempotency_django.contrib.prometheus`` is
installed too, so ``/metrics`` shows them next to the request counters.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from idempotency_django.databases import chosen_or_every
from idempotency_django.outbox import delivery
from idempotency_django.outbox.models import OutboxMessage

logger = logging.getLogger("idempotency_django.outbox")

GAUGES = (
    ("idempotency_outbox_pending", "Outbox rows not yet published.", "pending"),
    (
        "idempotency_outbox_oldest_pending_seconds",
        "Age of the oldest unpublished outbox row (database clock).",
        "oldest_pending_seconds",
    ),
    (
        "idempotency_outbox_failing",
        "Unpublished outbox rows whose last publish failed.",
        "failing",
    ),
    (
        "idempotency_outbox_publish_failures",
        "Failed publishes recorded on the unpublished outbox rows.",
        "failures",
    ),
    (
        "idempotency_outbox_dead",
        "Outbox rows dead-lettered (IDEMPOTENCY_OUTBOX_MAX_ATTEMPTS), awaiting an operator.",
        "dead",
    ),
)


class OutboxCollector(Collector):
    """One query per scrape; a database error is logged and yields no outbox gauges."""

    def __init__(self, using: str | None = None) -> None:
        self.using = using

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            found = [delivery.stats(a) for a in chosen_or_every(self.using, OutboxMessage)]
        except Exception:  # a scrape must never fail because the database is away
            logger.warning("outbox: stats unavailable for /metrics", exc_info=True)
            return
        for name, documentation, field in GAUGES:
            values = [float(getattr(stats, field)) for stats in found]
            # Summed over the databases holding outbox rows; the oldest is the oldest of all.
            value = max(values, default=0.0) if field == "oldest_pending_seconds" else sum(values)
            yield GaugeMetricFamily(name, documentation, value=value)

    def describe(self) -> Iterator[GaugeMetricFamily]:
        # Declared without querying: registering must not touch the database.
        for name, documentation, _ in GAUGES:
            yield GaugeMetricFamily(name, documentation)


_registered: dict[int, OutboxCollector] = {}


def register(registry: CollectorRegistry = REGISTRY) -> OutboxCollector:
    """Add the outbox's gauges to ``registry`` (once per registry) and, for the default
    registry, to ``/metrics``' multiprocess merge (which never sees the default one)."""
    from idempotency_django.contrib.prometheus.views import add_scrape_time_collector

    if id(registry) not in _registered:
        collector = OutboxCollector()
        registry.register(collector)
        _registered[id(registry)] = collector
    if registry is REGISTRY:
        add_scrape_time_collector(_registered[id(registry)])
    return _registered[id(registry)]
