"""``idempotency_django.contrib.opentelemetry``: span attributes and metrics from the signals.

The SDK's in-memory reader and exporter stand in for a collector; the global
providers are left alone (they can be set once per process).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer

from idempotency_django import signals
from idempotency_django.contrib.opentelemetry import receivers as otel
from idempotency_django.contrib.opentelemetry.apps import OpenTelemetryConfig

DIGEST = signals.key_digest("tenant-1", "the-secret-key")


@pytest.fixture
def reader() -> InMemoryMetricReader:
    return InMemoryMetricReader()


@pytest.fixture
def connected(reader: InMemoryMetricReader) -> Iterator[otel.Receivers]:
    receivers = otel.Receivers(MeterProvider(metric_readers=[reader]).get_meter("test"))
    receivers.connect()
    yield receivers
    receivers.disconnect()


@pytest.fixture
def spans() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def tracer(spans: InMemorySpanExporter) -> Tracer:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    return provider.get_tracer("test")


def outcome(sender: str = "http", **overrides: Any) -> None:
    fields: dict[str, Any] = {
        "outcome": signals.EXECUTED,
        "method": "POST",
        "route": "create-charge",
        "status": 201,
        "stored": True,
        "source": None,
        "protocol": "lock",
        "claim_seconds": 0.002,
        "waited_seconds": 0.0,
        "total_seconds": 0.02,
        "key_digest": DIGEST,
    }
    signals.send(signals.outcome, sender, **(fields | overrides))


def points(reader: InMemoryMetricReader, name: str) -> list[Any]:
    data = reader.get_metrics_data()
    assert data is not None
    return [
        point
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == name
        for point in metric.data.data_points
    ]


def metric_units(reader: InMemoryMetricReader) -> dict[str, str | None]:
    data = reader.get_metrics_data()
    assert data is not None
    return {
        metric.name: metric.unit
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }


def test_outcome_sets_attributes_on_the_current_span(
    connected: otel.Receivers, tracer: Tracer, spans: InMemorySpanExporter
) -> None:
    with tracer.start_as_current_span("POST create-charge"):
        outcome(outcome=signals.REPLAYED, stored=None, source="cache", waited_seconds=0.1)
    (span,) = spans.get_finished_spans()
    assert span.attributes is not None
    assert dict(span.attributes) == {
        "idempotency.outcome": "replayed",
        "idempotency.replayed": True,
        "idempotency.key_digest": DIGEST,
        "idempotency.protocol": "lock",
        "idempotency.replay.source": "cache",
        "idempotency.claim.duration": 0.002,
        "idempotency.wait.duration": 0.1,
    }


def test_span_never_carries_the_key(
    connected: otel.Receivers, tracer: Tracer, spans: InMemorySpanExporter
) -> None:
    with tracer.start_as_current_span("request"):
        outcome()
    (span,) = spans.get_finished_spans()
    assert span.attributes is not None
    assert span.attributes["idempotency.replayed"] is False
    assert span.attributes["idempotency.stored"] is True
    assert "the-secret-key" not in repr(dict(span.attributes))


def test_no_span_no_error(connected: otel.Receivers, reader: InMemoryMetricReader) -> None:
    outcome()  # the current span is the invalid, non-recording one
    assert [p.value for p in points(reader, "idempotency.requests")] == [1]


def test_requests_counter_with_http_attributes(
    connected: otel.Receivers, reader: InMemoryMetricReader
) -> None:
    outcome()
    outcome()
    outcome(outcome=signals.IN_PROGRESS, status=409, stored=None)
    outcome("task", method=None, route=None, status=None)
    counted = {
        frozenset(point.attributes.items()): point.value
        for point in points(reader, "idempotency.requests")
    }
    http = {"http.request.method": "POST", "idempotency.route": "create-charge"}
    assert counted == {
        frozenset(
            (http | {"idempotency.kind": "http", "idempotency.outcome": "executed"}).items()
        ): 2,
        frozenset(
            (http | {"idempotency.kind": "http", "idempotency.outcome": "in_progress"}).items()
        ): 1,
        frozenset({"idempotency.kind": "task", "idempotency.outcome": "executed"}.items()): 1,
    }


def test_claim_duration_histogram_in_seconds(
    connected: otel.Receivers, reader: InMemoryMetricReader
) -> None:
    outcome(claim_seconds=0.0004)
    outcome(protocol="lease", claim_seconds=0.003)
    outcome(outcome=signals.KEY_MISSING, protocol=None, claim_seconds=None)
    assert metric_units(reader)["idempotency.claim.duration"] == "s"
    assert metric_units(reader)["idempotency.requests"] == "{request}"
    by_protocol = {
        point.attributes["idempotency.protocol"]: point
        for point in points(reader, "idempotency.claim.duration")
    }
    assert set(by_protocol) == {"lock", "lease"}
    lock = by_protocol["lock"]
    assert isinstance(lock, HistogramDataPoint)
    assert (lock.count, lock.sum) == (1, 0.0004)
    assert tuple(lock.explicit_bounds) == otel.CLAIM_BUCKETS
    assert lock.bucket_counts[0] == 1  # 0.4 ms lands under the first bound, 0.5 ms


def test_reclaimed_purged_and_cache_errors(
    connected: otel.Receivers, reader: InMemoryMetricReader
) -> None:
    signals.send(signals.entry_reclaimed, "purge", how="purge", count=3, database="default")
    signals.send(signals.purge_finished, "purge", expired=5, abandoned=3, dry_run=False)
    signals.send(signals.purge_finished, "purge", expired=9, abandoned=9, dry_run=True)
    signals.send(signals.cache_failed, "cache", alias="replay", operation="get", error=None)

    def values(name: str) -> dict[Any, Any]:
        return {tuple(p.attributes.values()): p.value for p in points(reader, name)}

    assert values("idempotency.reclaimed") == {("purge",): 3}
    assert values("idempotency.purged") == {("expired",): 5, ("abandoned",): 3}
    assert values("idempotency.cache.errors") == {("get",): 1}


def test_off_unless_installed() -> None:
    prefix = otel.__name__
    assert not any(str(lookup[0]).startswith(prefix) for lookup, *_ in signals.outcome.receivers)


def test_the_app_connects_receivers_on_the_global_providers(
    tracer: Tracer, spans: InMemorySpanExporter
) -> None:
    config = OpenTelemetryConfig(
        "idempotency_django.contrib.opentelemetry",
        importlib.import_module("idempotency_django.contrib.opentelemetry"),
    )
    config.ready()
    try:
        with tracer.start_as_current_span("request"):
            outcome()
    finally:
        otel.default_receivers().disconnect()
    (span,) = spans.get_finished_spans()
    assert span.attributes is not None
    assert span.attributes["idempotency.outcome"] == "executed"
