"""The metrics, and the signal receivers that move them.

Labels are bounded: an outcome, the HTTP method, the route's name (never the
path), the claim protocol; never the key or the tenant. Children of known
label values are bound once, at start, and others on first use, so that a
receiver costs a dictionary lookup and an increment.
"""

from __future__ import annotations

import functools
from typing import Any, Final

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from idempotency_django import signals
from idempotency_django.contrib.receivers import SignalReceivers

#: Claims take a round trip or two: from half a millisecond up.
CLAIM_BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)
#: A replay from the cache is sub-millisecond; an execution is the view's time.
REQUEST_BUCKETS: Final = (
    *(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1),
    *(0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
RECLAIM_WAYS: Final = ("takeover", "purge", "admin")
PURGED_KINDS: Final = ("expired", "abandoned")
CACHE_OPERATIONS: Final = ("get", "set")
DEAD_LETTER_SOURCES: Final = ("consumer", "outbox", "task")
PROTOCOLS: Final = ("lock", "lease")


class Metrics(SignalReceivers):
    """The library's metrics in one registry, with a receiver method per signal."""

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        def counter(name: str, doc: str, *labels: str) -> Counter:
            return Counter(name, doc, labels, registry=registry)

        self.requests = counter(
            "idempotency_requests",
            "Protected HTTP requests by outcome.",
            "outcome",
            "method",
            "route",
        )
        self.calls = counter(
            "idempotency_calls", "Idempotent tasks and calls by outcome.", "kind", "outcome"
        )
        self.claim_seconds = Histogram(
            "idempotency_claim_seconds",
            "Time spent claiming a key.",
            ["protocol"],
            buckets=CLAIM_BUCKETS,
            registry=registry,
        )
        self.request_seconds = Histogram(
            "idempotency_request_seconds",
            "Whole protected HTTP requests, claim and view included, by outcome.",
            ["outcome"],
            buckets=REQUEST_BUCKETS,
            registry=registry,
        )
        self.reclaimed = counter(
            "idempotency_reclaimed", "Abandoned claims reclaimed (deleted).", "how"
        )
        self.purged = counter("idempotency_purged", "Entries deleted by purge runs.", "kind")
        self.last_purge = Gauge(
            "idempotency_purge_last_run_timestamp_seconds",
            "When the last purge run (not a dry run) finished, in Unix time.",
            registry=registry,
            multiprocess_mode="max",
        )
        self.cache_errors = counter(
            "idempotency_cache_errors", "Replay-cache operations that failed.", "operation"
        )
        self.dead_letters = counter(
            "idempotency_dead_letters",
            "Messages, outbox rows and tasks given up on (dead-lettered), by source.",
            "source",
        )
        self._children: dict[tuple[object, tuple[str, ...]], Any] = {}
        self._bind_known()

    def _bind_known(self) -> None:
        # Bound at start: each series then exists at 0, so rate() sees its first increment.
        # Requests and calls are bound on first use: their routes are not known here.
        for protocol in PROTOCOLS:
            self._child(self.claim_seconds, protocol)
        for how in RECLAIM_WAYS:
            self._child(self.reclaimed, how)
        for kind in PURGED_KINDS:
            self._child(self.purged, kind)
        for operation in CACHE_OPERATIONS:
            self._child(self.cache_errors, operation)
        for source in DEAD_LETTER_SOURCES:
            self._child(self.dead_letters, source)

    def _child(self, metric: Any, *labels: str) -> Any:
        key = (metric, labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def on_outcome(self, sender: object, **fields: Any) -> None:
        outcome = str(fields.get("outcome"))
        if sender == "http":
            method, route = fields.get("method") or "", fields.get("route") or ""
            self._child(self.requests, outcome, method, route).inc()
            total = fields.get("total_seconds")
            if total is not None:
                self._child(self.request_seconds, outcome).observe(total)
        else:
            self._child(self.calls, str(sender), outcome).inc()
        claim = fields.get("claim_seconds")
        if claim is not None:
            self._child(self.claim_seconds, str(fields.get("protocol") or "")).observe(claim)

    def on_entry_reclaimed(self, sender: object, **fields: Any) -> None:
        self._child(self.reclaimed, str(fields.get("how"))).inc(fields.get("count", 1))

    def on_purge_finished(self, sender: object, **fields: Any) -> None:
        if fields.get("dry_run"):
            return
        self._child(self.purged, "expired").inc(fields.get("expired", 0))
        self._child(self.purged, "abandoned").inc(fields.get("abandoned", 0))
        self.last_purge.set_to_current_time()

    def on_cache_failed(self, sender: object, **fields: Any) -> None:
        self._child(self.cache_errors, str(fields.get("operation"))).inc()

    def on_dead_lettered(self, sender: object, **fields: Any) -> None:
        self._child(self.dead_letters, str(sender)).inc()

    def _receivers(self) -> list[tuple[Any, Any]]:
        return [*super()._receivers(), (signals.dead_lettered, self.on_dead_lettered)]


@functools.cache
def default_metrics() -> Metrics:
    """The metrics in prometheus_client's default registry (created once per process)."""
    return Metrics(REGISTRY)


def connect() -> Metrics:
    """Connect :func:`default_metrics` to the signals; what the app's ``ready()`` calls."""
    metrics = default_metrics()
    metrics.connect()
    return metrics


__all__ = ["Metrics", "connect", "default_metrics"]
