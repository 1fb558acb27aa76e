"""Span attributes and OpenTelemetry metrics, moved by the library's signals.

On each outcome the current span (the server span of an instrumented request,
or the task's) gets ``idempotency.*`` attributes, and the metrics API records
``idempotency.requests`` and ``idempotency.claim.duration``. HTTP attributes use
the semantic conventions' names where they mean the same thing
(``http.request.method``); the route is ``idempotency.route``, not
``http.route``, because it is the URL pattern's *name*, not its template.
The key is never recorded: ``idempotency.key_digest`` stands for it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Final

from opentelemetry import metrics, trace
from opentelemetry.util.types import AttributeValue

from idempotency_django import signals
from idempotency_django.contrib.receivers import SignalReceivers

METER_NAME: Final = "idempotency_django"
#: The semantic conventions' advice for HTTP durations, with sub-millisecond
#: buckets added: a claim is a round trip or two.
CLAIM_BUCKETS: Final = (
    *(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1),
    *(0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0),
)
Attributes = Mapping[str, AttributeValue]


class Receivers(SignalReceivers):
    """The instruments of one meter, with a receiver method per signal."""

    def __init__(self, meter: metrics.Meter) -> None:
        self.requests = meter.create_counter(
            "idempotency.requests", "{request}", "Protected requests, tasks and calls by outcome."
        )
        self.claim_duration = meter.create_histogram(
            "idempotency.claim.duration",
            "s",
            "Time spent claiming a key.",
            explicit_bucket_boundaries_advisory=CLAIM_BUCKETS,
        )
        self.reclaimed = meter.create_counter(
            "idempotency.reclaimed", "{entry}", "Abandoned claims reclaimed (deleted)."
        )
        self.purged = meter.create_counter(
            "idempotency.purged", "{entry}", "Entries deleted by purge runs."
        )
        self.cache_errors = meter.create_counter(
            "idempotency.cache.errors", "{error}", "Replay-cache operations that failed."
        )
        self._attributes: dict[tuple[Any, ...], Attributes] = {}

    def on_outcome(self, sender: object, **fields: Any) -> None:
        span = trace.get_current_span()
        if span.is_recording():
            span.set_attributes(span_attributes(fields))
        outcome, method, route = fields.get("outcome"), fields.get("method"), fields.get("route")
        self.requests.add(1, self._request_attributes(str(sender), outcome, method, route))
        claim = fields.get("claim_seconds")
        if claim is not None:
            protocol = fields.get("protocol") or ""
            self.claim_duration.record(claim, self._cached(("protocol", protocol)))

    def _request_attributes(
        self, kind: str, outcome: object, method: object, route: object
    ) -> Attributes:
        key = ("request", kind, outcome, method, route)
        found = self._attributes.get(key)
        if found is None:
            built: dict[str, AttributeValue] = {
                "idempotency.kind": kind,
                "idempotency.outcome": str(outcome),
            }
            if method is not None:
                built["http.request.method"] = str(method)
            if route is not None:
                built["idempotency.route"] = str(route)
            found = self._attributes[key] = built
        return found

    def _cached(self, key: tuple[str, str]) -> Attributes:
        found = self._attributes.get(key)
        if found is None:
            found = self._attributes[key] = {f"idempotency.{key[0]}": key[1]}
        return found

    def on_entry_reclaimed(self, sender: object, **fields: Any) -> None:
        self.reclaimed.add(fields.get("count", 1), self._cached(("how", str(fields.get("how")))))

    def on_purge_finished(self, sender: object, **fields: Any) -> None:
        if fields.get("dry_run"):
            return
        for kind in ("expired", "abandoned"):
            self.purged.add(fields.get(kind, 0), self._cached(("purge.kind", kind)))

    def on_cache_failed(self, sender: object, **fields: Any) -> None:
        operation = str(fields.get("operation"))
        self.cache_errors.add(1, self._cached(("cache.operation", operation)))


def span_attributes(fields: Mapping[str, Any]) -> dict[str, AttributeValue]:
    """The ``idempotency.*`` attributes an outcome puts on the current span."""
    outcome = str(fields.get("outcome"))
    attributes: dict[str, AttributeValue] = {
        "idempotency.outcome": outcome,
        "idempotency.replayed": outcome == signals.REPLAYED,
    }
    for name, field in (
        ("idempotency.key_digest", "key_digest"),
        ("idempotency.protocol", "protocol"),
        ("idempotency.replay.source", "source"),
        ("idempotency.stored", "stored"),
        ("idempotency.claim.duration", "claim_seconds"),
        ("idempotency.wait.duration", "waited_seconds"),
    ):
        value = fields.get(field)
        if value is not None:
            attributes[name] = value
    return attributes


@functools.cache
def default_receivers() -> Receivers:
    """Receivers on the global meter provider (a proxy until the SDK sets one up)."""
    return Receivers(metrics.get_meter(METER_NAME, _version()))


def _version() -> str:
    try:
        return version("idempotency-django")
    except PackageNotFoundError:  # pragma: no cover - running from a checkout without install
        return ""


def connect() -> Receivers:
    """Connect :func:`default_receivers` to the signals; what the app's ``ready()`` calls."""
    receivers = default_receivers()
    receivers.connect()
    return receivers


__all__ = ["Receivers", "connect", "default_receivers", "span_attributes"]
