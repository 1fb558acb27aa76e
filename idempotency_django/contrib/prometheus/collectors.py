"""Gauges read from the database at scrape time: keys in flight, the purge's lag, the
consumers' failures (:mod:`idempotency_django._operations.glance`, index-backed queries).

Registered by the app's ``ready()``, so ``/metrics`` shows them next to the counters;
under multiprocess mode they are added to the merge, as the outbox's gauges are.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Iterator
from typing import Final

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from idempotency_django._operations import glance
from idempotency_django.databases import chosen_or_every

logger = logging.getLogger("idempotency_django")

IN_FLIGHT: Final = "idempotency_in_flight"
IN_FLIGHT_OLDEST: Final = "idempotency_in_flight_oldest_seconds"
PURGE_LAG: Final = "idempotency_purge_lag_seconds"
CONSUMER_FAILING: Final = "idempotency_consumer_failing"
CONSUMER_DEAD: Final = "idempotency_consumer_dead"
DOCS: Final = {
    IN_FLIGHT: "Idempotency keys in flight (in-progress entries).",
    IN_FLIGHT_OLDEST: "Age of the oldest in-progress entry (database clock).",
    PURGE_LAG: "How long the oldest expired entry has waited for the purge.",
    CONSUMER_FAILING: "Consumed messages whose handler failed and will be retried.",
    CONSUMER_DEAD: "Consumed messages given up on (dead letters) awaiting an operator.",
}


class EntriesCollector(Collector):
    """A few index-backed queries per scrape, over every database holding entries;
    a database error is logged and yields none of these gauges."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            values = _read()
        except Exception:  # a scrape must never fail because the database is away
            logger.warning("idempotency: entry gauges unavailable for /metrics", exc_info=True)
            return
        for name, value in values.items():
            yield GaugeMetricFamily(name, DOCS[name], value=value)

    def describe(self) -> Iterator[GaugeMetricFamily]:
        # Declared without querying: registering must not touch the database.
        for name, documentation in DOCS.items():
            yield GaugeMetricFamily(name, documentation)


def _read() -> dict[str, float]:
    flights = [glance.in_flight(alias) for alias in chosen_or_every(None)]
    lags = [glance.purge_lag(alias) for alias in chosen_or_every(None)]
    values = {
        IN_FLIGHT: float(sum(f.count for f in flights)),
        IN_FLIGHT_OLDEST: max((f.oldest_seconds for f in flights), default=0.0),
        PURGE_LAG: max(lags, default=0.0),
    }
    consumers = _consumer_failures()
    if consumers is not None:
        values[CONSUMER_FAILING], values[CONSUMER_DEAD] = consumers
    return values


def _consumer_failures() -> tuple[float, float] | None:
    if not glance.consumers_installed():
        return None
    from idempotency_django.consumers.models import ConsumerFailure

    found = [glance.consumer_failures(a) for a in chosen_or_every(None, ConsumerFailure)]
    return float(sum(f.failing for f in found)), float(sum(f.dead for f in found))


# By the registry itself, weakly: an id() outlives its registry, and a new registry given
# the same id would be taken for one already holding the gauges.
_registered: weakref.WeakKeyDictionary[CollectorRegistry, EntriesCollector] = (
    weakref.WeakKeyDictionary()
)


def register(registry: CollectorRegistry = REGISTRY) -> EntriesCollector:
    """Add the gauges to ``registry`` (once per registry) and, for the default registry,
    to ``/metrics``' multiprocess merge (which never sees the default one)."""
    from idempotency_django.contrib.prometheus.views import add_scrape_time_collector

    collector = _registered.get(registry)
    if collector is None:
        collector = _registered[registry] = EntriesCollector()
        registry.register(collector)
    if registry is REGISTRY:
        add_scrape_time_collector(collector)
    return collector
