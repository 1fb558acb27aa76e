"""The operators' views reach every shard: the gauges sum the shards' keys in flight,
and the admin's overview reads the shard its ``?database=`` names."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from prometheus_client import CollectorRegistry

from idempotency_django.contrib.prometheus import collectors
from tests.factories import IdempotencyEntryFactory

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "shard1", "replica"])


def in_flight(alias: str, count: int) -> None:
    for _ in range(count):
        IdempotencyEntryFactory.build(in_progress=True).save(using=alias)


def test_the_in_flight_gauge_sums_the_shards() -> None:
    in_flight("default", 1)
    in_flight("shard1", 2)
    registry = CollectorRegistry()
    collectors.register(registry)
    assert registry.get_sample_value(collectors.IN_FLIGHT) == 3


def test_the_overview_reads_the_shard_the_list_names() -> None:
    in_flight("shard1", 2)
    user = User.objects.create_superuser("root", password="x")
    client = Client()
    client.force_login(user)
    url = reverse("admin:idempotency_django_idempotencyentry_overview")
    on_default = client.get(url).content.decode()
    on_shard = client.get(f"{url}?database=shard1").content.decode()
    assert "Database default:" in on_default
    assert '<th>keys in flight</th><td class="n">0</td>' in on_default
    assert "Database shard1:" in on_shard
    assert '<th>keys in flight</th><td class="n">2</td>' in on_shard
    assert "_changelist_filters=database%3Dshard1" in on_shard
