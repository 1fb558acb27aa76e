"""What an operator reads at a glance, in index-backed queries that stay fast on a table
of ten million entries: the keys in flight, the purge's lag, the consumers' failures.

Shared by the Prometheus gauges (:mod:`idempotency_django.contrib.prometheus.collectors`)
and the admin's overview (:mod:`idempotency_django._operations.overview`). Ages are read on the
database's clock, which also wrote the rows' times.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.apps import apps
from django.db.models import Count, DateTimeField, ExpressionWrapper, Max, Min, Q
from django.db.models.functions import Now

from idempotency_django.models import IdempotencyEntry

CONSUMERS_APP = "idempotency_django.consumers"


def _now() -> ExpressionWrapper[Now]:
    return ExpressionWrapper(Now(), output_field=DateTimeField())


def _seconds(age: timedelta | None) -> float:
    return 0.0 if age is None else max(0.0, age.total_seconds())


@dataclass(frozen=True)
class InFlight:
    """In-progress entries (committed claims: the lease protocol's; a lock-protocol claim
    is a row only once its request has committed), and the oldest one's age and id."""

    count: int
    oldest_seconds: float
    oldest_pk: int | None


def in_flight(using: str) -> InFlight:
    """Read through the in-progress entries' partial index (``idempotency_zombie_idx``)."""
    rows = IdempotencyEntry.objects.using(using).filter(status=IdempotencyEntry.Status.IN_PROGRESS)
    found = rows.aggregate(count=Count("pk"), oldest=Min("created_at"), now=Max(_now()))
    if not found["count"]:
        return InFlight(0, 0.0, None)
    oldest = rows.order_by("created_at", "pk").values_list("pk", flat=True).first()
    return InFlight(found["count"], _seconds(found["now"] - found["oldest"]), oldest)


def purge_lag(using: str) -> float:
    """How long the oldest expired entry has waited for the purge (0: none waits).

    One probe of the ``expires_at`` index, however many entries there are.
    """
    rows = IdempotencyEntry.objects.using(using).filter(expires_at__lte=Now())
    first: Any = rows.order_by("expires_at").annotate(now=_now()).values_list("expires_at", "now")
    found = first.first()
    return 0.0 if found is None else _seconds(found[1] - found[0])


@dataclass(frozen=True)
class ConsumerFailures:
    failing: int
    dead: int


def consumers_installed() -> bool:
    return apps.is_installed(CONSUMERS_APP)


def consumer_failures(using: str) -> ConsumerFailures:
    """Messages failing now, and dead letters (the consumers app installed)."""
    from idempotency_django.consumers.models import ConsumerFailure

    found = ConsumerFailure.objects.using(using).aggregate(
        failing=Count("pk", filter=Q(dead_at=None)), dead=Count("pk", filter=~Q(dead_at=None))
    )
    return ConsumerFailures(found["failing"], found["dead"])
