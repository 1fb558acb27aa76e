"""The exporter's gauges read at scrape time (keys in flight, the purge's lag, the
consumers' failures) and the dead-letter counter: what the dashboard and alerts query."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.utils import timezone
from prometheus_client import REGISTRY, CollectorRegistry

from idempotency_django import signals
from idempotency_django._operations import glance
from idempotency_django.consumers.models import ConsumerFailure
from idempotency_django.contrib.prometheus import collectors
from idempotency_django.contrib.prometheus.metrics import Metrics
from idempotency_django.contrib.prometheus.views import SCRAPE_TIME
from tests.factories import IdempotencyEntryFactory


@pytest.fixture
def registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    collectors.register(registry)
    return registry


def gauge(registry: CollectorRegistry, name: str) -> float | None:
    return registry.get_sample_value(name)


def ago(seconds: float) -> object:
    return timezone.now() - timedelta(seconds=seconds)


@pytest.mark.django_db
def test_an_empty_table_reads_zero_everywhere(registry: CollectorRegistry) -> None:
    for name in collectors.DOCS:
        assert gauge(registry, name) == 0.0, name


@pytest.mark.django_db
def test_keys_in_flight_their_age_and_the_purge_lag(registry: CollectorRegistry) -> None:
    IdempotencyEntryFactory.create(in_progress=True, created_at=ago(600))
    IdempotencyEntryFactory.create(in_progress=True, created_at=ago(5))
    IdempotencyEntryFactory.create(expires_at=ago(3600))
    IdempotencyEntryFactory.create(expires_at=ago(60))
    IdempotencyEntryFactory.create()  # finished, not expired: none of these
    assert gauge(registry, collectors.IN_FLIGHT) == 2
    assert 600 <= (gauge(registry, collectors.IN_FLIGHT_OLDEST) or 0) < 3600
    assert 3600 <= (gauge(registry, collectors.PURGE_LAG) or 0) < 7200


@pytest.mark.django_db
def test_the_oldest_in_flight_entry_is_named_for_the_admin() -> None:
    IdempotencyEntryFactory.create(in_progress=True, created_at=ago(5))
    oldest = IdempotencyEntryFactory.create(in_progress=True, created_at=ago(600))
    assert glance.in_flight("default").oldest_pk == oldest.pk


@pytest.mark.django_db
def test_consumer_failures_failing_and_dead(registry: CollectorRegistry) -> None:
    ConsumerFailure.objects.create(key="s\x1fa", failures=1)
    ConsumerFailure.objects.create(key="s\x1fb", failures=5, dead_at=timezone.now())
    ConsumerFailure.objects.create(key="s\x1fc", failures=5, dead_at=timezone.now())
    assert gauge(registry, collectors.CONSUMER_FAILING) == 1
    assert gauge(registry, collectors.CONSUMER_DEAD) == 2


@pytest.mark.django_db
def test_without_the_consumers_app_no_consumer_gauges(
    registry: CollectorRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(glance, "consumers_installed", lambda: False)
    assert gauge(registry, collectors.CONSUMER_DEAD) is None
    assert gauge(registry, collectors.IN_FLIGHT) == 0


def test_a_database_away_yields_no_gauges_and_a_warning(
    registry: CollectorRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="idempotency_django"):
        assert gauge(registry, collectors.IN_FLIGHT) is None  # no database access here
    assert "entry gauges unavailable" in caplog.text


def test_describing_touches_no_database() -> None:
    names = {family.name for family in collectors.EntriesCollector().describe()}
    assert names == set(collectors.DOCS)


@pytest.fixture
def on_default() -> Iterator[None]:
    yield
    collector = collectors._registered.pop(REGISTRY)
    REGISTRY.unregister(collector)
    SCRAPE_TIME.remove(collector)


def test_registered_once_and_in_the_multiprocess_merge(on_default: None) -> None:
    collector = collectors.register()
    assert collectors.register() is collector
    assert collectors.register(REGISTRY) is collector
    assert SCRAPE_TIME.count(collector) == 1


def test_dead_letters_are_counted_by_source() -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    metrics.connect()
    try:
        for sender in ("consumer", "consumer", "outbox", "task"):
            signals.send(signals.dead_lettered, sender, key_digest="0", attempts=1, error=None)
    finally:
        metrics.disconnect()
    counts = {
        source: registry.get_sample_value("idempotency_dead_letters_total", {"source": source})
        for source in ("consumer", "outbox", "task")
    }
    assert counts == {"consumer": 2, "outbox": 1, "task": 1}


def holds_the_gauges(registry: CollectorRegistry) -> bool:
    return any(isinstance(c, collectors.EntriesCollector) for c in registry._collector_to_names)


def test_a_new_registry_at_a_dead_ones_address_gets_the_gauges_too() -> None:
    """0.6's first cut kept registries by ``id()``: a registry made where a collected one
    had been was taken for it, and scraped no gauge (a flaky test found it)."""
    first = CollectorRegistry()
    collectors.register(first)
    address = id(first)
    del first
    for _ in range(1000):  # CPython hands the freed address to the next object of its size
        reused = CollectorRegistry()
        if id(reused) == address:
            break
    else:
        pytest.skip("no new registry was made at the freed address")
    collectors.register(reused)
    assert holds_the_gauges(reused)
