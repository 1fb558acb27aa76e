"""Signal receivers to connect around a measured request, and to disconnect after it.

The library's own receivers (``idempotency_django.contrib.prometheus`` and
``contrib.opentelemetry``, issue 13) when this checkout has them and their
libraries are installed; otherwise a stand-in doing the same kind of work per
outcome (a labelled counter and two histogram observations under a lock, six
span-like attributes), named as such in the table.

OpenTelemetry is measured as it runs in production: with the SDK's meter and
tracer providers installed (metrics aggregated in memory) and a recording
span current during the request, started and ended outside the timed part.
The library's log receiver is always connected (``AppConfig.ready()``), so it
is part of both sides.
"""

from __future__ import annotations

import bisect
import contextlib
import importlib.util
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from idempotency_django import signals

Toggle = tuple[Callable[[], None], Callable[[], None]]


@dataclass
class Receivers:
    """What is connected (a label for the table), how, and what to run the request in."""

    label: str
    toggles: list[Toggle]
    around: Callable[[], AbstractContextManager[object]] = field(default=contextlib.nullcontext)
    names: list[str] = field(default_factory=list)  # one per toggle

    def connect(self) -> None:
        for connect, _ in self.toggles:
            connect()

    def disconnect(self) -> None:
        for _, disconnect in self.toggles:
            disconnect()

    def one(self, index: int) -> Receivers:
        """Only the ``index``-th receiver (with the same span around the request)."""
        return Receivers(self.names[index], [self.toggles[index]], self.around, [self.names[index]])


def available() -> Receivers:
    found = Receivers("", [])
    names: list[str] = []
    if _importable("idempotency_django.contrib.prometheus", "prometheus_client"):
        from idempotency_django.contrib.prometheus import (  # type: ignore[import-not-found, unused-ignore]
            metrics,
        )

        prometheus = metrics.default_metrics()
        found.toggles.append((prometheus.connect, prometheus.disconnect))
        names.append("contrib.prometheus")
    if _importable("idempotency_django.contrib.opentelemetry", "opentelemetry.metrics"):
        sdk = _opentelemetry_sdk()
        from idempotency_django.contrib.opentelemetry import (  # type: ignore[import-not-found, unused-ignore]
            receivers,
        )

        otel = receivers.default_receivers()
        found.toggles.append((otel.connect, otel.disconnect))
        if sdk is not None:
            found.around = sdk
            names.append("contrib.opentelemetry (SDK, recording span)")
        else:
            names.append("contrib.opentelemetry (API only: no SDK installed)")
    if not found.toggles:
        stand_in = StandIn()
        found.toggles.append((stand_in.connect, stand_in.disconnect))
        names.append("stand-in receiver (contrib.prometheus/opentelemetry not on this checkout)")
    found.label = " + ".join(names)
    found.names = names
    return found


def _opentelemetry_sdk() -> Callable[[], AbstractContextManager[object]] | None:
    """Install the SDK's providers (before the receivers make their instruments)."""
    if not _importable("opentelemetry.sdk"):
        return None
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider

    metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))
    trace.set_tracer_provider(TracerProvider())
    tracer = trace.get_tracer("bench")
    return lambda: tracer.start_as_current_span("POST /lock/", kind=trace.SpanKind.SERVER)


def _importable(*modules: str) -> bool:
    try:
        return all(importlib.util.find_spec(module) is not None for module in modules)
    except ModuleNotFoundError:
        return False


_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class StandIn:
    """What a Prometheus plus an OpenTelemetry receiver do per outcome, without either."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: dict[tuple[str, ...], int] = {}
        self.histograms: dict[tuple[str, ...], list[float]] = {}
        self.attributes: dict[str, Any] = {}

    def on_outcome(self, sender: object, **fields: Any) -> None:
        labels = (str(fields.get("outcome")), str(fields.get("method")), str(fields.get("route")))
        with self.lock:
            self.counts[labels] = self.counts.get(labels, 0) + 1
        for name in ("total_seconds", "claim_seconds"):
            value = fields.get(name)
            if value is not None:
                self._observe((name, *labels[:1]), float(value))
        for name in ("outcome", "protocol", "source", "stored", "claim_seconds", "key_digest"):
            self.attributes[f"idempotency.{name}"] = fields.get(name)

    def _observe(self, labels: tuple[str, ...], value: float) -> None:
        with self.lock:
            buckets = self.histograms.setdefault(labels, [0.0] * (len(_BUCKETS) + 2))
            buckets[bisect.bisect_left(_BUCKETS, value)] += 1
            buckets[-1] += value

    def connect(self) -> None:
        signals.outcome.connect(self.on_outcome, weak=False, dispatch_uid=f"bench-{id(self)}")

    def disconnect(self) -> None:
        signals.outcome.disconnect(dispatch_uid=f"bench-{id(self)}")
