"""The replay cache's key space is the store's: (database, tenant, key).

With a database chosen per request (one per customer), tenant strings repeat
across databases: user pks start at 1 in each. Customer B's request, with the
same key and body as customer A's, must run B's own charge, never be answered
A's stored answer from the shared cache.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.cache import caches
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.test import Client, override_settings
from django.urls import path

from idempotency_django import idempotent
from idempotency_django._storage import cache
from tests.helpers import new_key
from tests.testapp.models import Charge

pytestmark = [
    pytest.mark.django_db(transaction=True, databases=["default", "shard1"]),
    pytest.mark.requires_redis,
    pytest.mark.urls(__name__),
]


def customer_database(request: HttpRequest) -> str:
    return request.headers["X-Database"]


def user(request: HttpRequest) -> str:
    return request.headers["X-User"]  # "1" in each database


@idempotent(database=customer_database, tenant=user, cache="replay")
def charge(request: HttpRequest) -> HttpResponse:
    database = customer_database(request)
    made = Charge.objects.using(database).create(reference=request.headers["X-Ref"], amount=1)
    return JsonResponse({"database": database, "id": made.pk}, status=201)


urlpatterns = [path("charges/", charge)]


@pytest.fixture
def key(redis_url: str) -> Iterator[str]:
    key = new_key()
    yield key
    caches["replay"].delete_many(
        [cache.cache_key(database, "1", key) for database in ("default", "shard1")]
    )


def send(database: str, key: str) -> Any:
    return Client().post(
        "/charges/",
        json.dumps({"amount": 1}),
        content_type="application/json",
        headers={"Idempotency-Key": key, "X-Database": database, "X-User": "1", "X-Ref": key},
    )


def test_a_cached_answer_of_one_database_never_answers_another_databases_customer(
    key: str,
) -> None:
    with override_settings(IDEMPOTENCY_TTL=300):
        assert send("default", key).status_code == 201
        replayed = send("default", key)  # the first replay fills the cache
        assert replayed["Idempotent-Replayed"] == "true"
        assert cache._store("replay").get(cache.cache_key("default", "1", key)) is not None

        other = send("shard1", key)

    assert other.status_code == 201
    assert "Idempotent-Replayed" not in other
    assert json.loads(other.content)["database"] == "shard1"
    assert Charge.objects.using("shard1").filter(reference=key).count() == 1
    assert Charge.objects.using("default").filter(reference=key).count() == 1
