"""(5) Two PostgreSQL databases as shards behind a tenant router: a storm of duplicates
across tenants of both shards commits each (tenant, key) once, in its tenant's shard."""

from __future__ import annotations

import functools
import json
from collections import Counter
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from idempotency_django.models import IdempotencyEntry
from tests.helpers import new_key, race
from tests.multidb.routing import SHARDS, shard_of
from tests.testapp.models import Charge

pytestmark = [
    pytest.mark.requires_postgres,
    pytest.mark.django_db(transaction=True, databases=["default", "shard1", "replica"]),
]
TENANTS = ("a-1", "a-2", "b-1", "b-2")  # two per shard
TRIALS = 12
THREADS = 16


@pytest.fixture(params=["lock", "lease"], autouse=True)
def protocol(request: pytest.FixtureRequest, settings: Any) -> str:
    settings.IDEMPOTENCY_PROTOCOL = request.param
    return str(request.param)


def _send(tenant: str, key: str, sleep: float) -> Any:
    return Client(raise_request_exception=False).post(
        "/sharded/charges/",
        json.dumps({"amount": 1, "sleep": sleep}),
        content_type="application/json",
        headers={"Idempotency-Key": key, "X-Tenant": tenant, "X-Ref": f"{tenant}/{key}"},
    )


def _send_nth(index: int, *, key: str, sleep: float) -> Any:
    return _send(TENANTS[index % len(TENANTS)], key, sleep)


def test_a_storm_across_both_shards_commits_each_key_once_in_its_shard(protocol: str) -> None:
    kinds: Counter[str] = Counter()
    keys = []
    for trial in range(TRIALS):
        key = f"storm-{trial}-{new_key()}"  # one key, four tenants: four independent entries
        keys.append(key)
        sleep = 0.02 if trial % 2 else 0.0
        responses = race(THREADS, functools.partial(_send_nth, key=key, sleep=sleep))
        assert not [r for r in responses if isinstance(r, BaseException)], responses
        for response in responses:
            replayed = response.get("Idempotent-Replayed") == "true"
            kinds["409" if response.status_code == 409 else "replay" if replayed else "run"] += 1
            assert response.status_code in (201, 409), response.content
    duplicates = 0
    for key in keys:
        for tenant in TENANTS:
            home, other = shard_of(tenant), next(s for s in SHARDS if s != shard_of(tenant))
            ref = f"{tenant}/{key}"
            assert Charge.objects.using(other).filter(reference=ref).count() == 0
            duplicates += Charge.objects.using(home).filter(reference=ref).count() - 1
            assert IdempotencyEntry.objects.using(home).filter(tenant=tenant, key=key).count() == 1
            assert not IdempotencyEntry.objects.using(other).filter(tenant=tenant).exists()
    assert duplicates == 0
    assert kinds["run"] == TRIALS * len(TENANTS)
    assert kinds["409"] + kinds["replay"] > 0
    print(f"\nshard storm ({protocol}): {TRIALS} x {THREADS} threads: {dict(kinds)}, duplicates 0")

    for alias in SHARDS:
        IdempotencyEntry.objects.using(alias).update(expires_at=timezone.now() - timedelta(1))
    out = StringIO()
    call_command("purge_idempotency", stdout=out)
    per_shard = TRIALS * len(TENANTS) // 2
    for alias in SHARDS:
        assert (
            f"Deleted {per_shard} expired and 0 abandoned in-progress entries from {alias!r}."
            in out.getvalue()
        )
        assert not IdempotencyEntry.objects.using(alias).exists()
