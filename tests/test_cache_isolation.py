"""Two projects sharing one Redis never see each other's replay-cache entries.

The cache's names are keyed with the project's own secret (``IDEMPOTENCY_SECRET``,
else ``SECRET_KEY``), so the default ``KEY_PREFIX`` shared by two projects is no
longer a shared key space; and they carry the entries database's identity, so two
deployments of one project (tests/test_sealing_adversaries.py) are not one either.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.core.cache import caches
from django.test import Client, override_settings

from idempotency_django._storage import cache, secret
from idempotency_django.models import IdempotencyDatabase, IdempotencyEntry
from tests.helpers import charges, new_key, post

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.requires_redis]
FIRST = {"SECRET_KEY": "first project's secret key"}
SECOND = {"SECRET_KEY": "second project's secret key"}


@pytest.fixture
def key(redis_url: str) -> Iterator[str]:
    key = new_key()
    yield key
    for project in (FIRST, SECOND):
        with override_settings(**project):
            caches["replay"].delete(cache.cache_key("default", "", key))


def test_a_project_is_never_answered_another_projects_cached_answer(key: str) -> None:
    with override_settings(IDEMPOTENCY_CACHE="replay", IDEMPOTENCY_TTL=300):
        with override_settings(**FIRST):
            assert post(Client(), "/charges/", key).status_code == 201
            assert post(Client(), "/charges/", key)["Idempotent-Replayed"] == "true"
        # The second project has its own database: the first one's entry is not in it.
        IdempotencyEntry.objects.all().delete()
        with override_settings(**SECOND):
            second = post(Client(), "/charges/", key)

    assert second.status_code == 201
    assert "Idempotent-Replayed" not in second
    assert charges(key) == 2


@pytest.mark.django_db(transaction=True)
def test_the_cache_key_names_the_databases_identity_and_the_projects_secret() -> None:
    with override_settings(**FIRST):
        first = cache.cache_key("default", "1", "k")
        assert cache.cache_key("default", "2", "k") != first
        IdempotencyDatabase.objects.all().delete()  # another database: its own identity
        secret._cache.clear()
        assert cache.cache_key("default", "1", "k") != first
        first = cache.cache_key("default", "1", "k")
    with override_settings(**SECOND):
        assert cache.cache_key("default", "1", "k") != first
    with override_settings(IDEMPOTENCY_SECRET="s", **FIRST):
        assert cache.cache_key("default", "1", "k") != first
