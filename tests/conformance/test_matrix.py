"""The conformance scenarios over the supported combinations (``tests.conformance.matrix``).

Each combination runs in process (Django's test client, real threads) in the tier
that provides its database, pooler and layout; the other tiers skip it. CI runs
the pairwise set; ``make conformance-full`` the product. With
``IDEMPOTENCY_CONFORMANCE_RESULTS=PATH`` each run appends its result there, from
which ``python -m tests.conformance.matrix PATH`` writes the docs' table.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import astuple, fields
from typing import Any

import pytest
from django.db import connection, connections
from django.test import Client

from idempotency_django.conformance import PASS
from idempotency_django.testing import run_conformance
from tests.conformance import matrix
from tests.conformance.matrix import Combination
from tests.testapp.models import Charge

PROTOCOLS = {"pg-lock": "lock", "pg-lease": "lease"}


def test_the_pairwise_set_covers_every_valid_pair_of_values() -> None:
    needed = set().union(*(matrix._pairs(c) for c in matrix.product()))
    chosen = matrix.pairwise()
    assert set().union(*(matrix._pairs(c) for c in chosen)) == needed
    assert all(matrix.valid(c) for c in chosen)
    assert len(chosen) < len(matrix.product()) / 5


def test_invalid_combinations_are_excluded() -> None:
    assert not matrix.valid(Combination("drf", "sqlite", "none", "off", "pgbouncer", "one"))
    assert not matrix.valid(Combination("drf", "mariadb", "none", "off", "direct", "chooser"))
    assert not matrix.valid(Combination("drf", "pg-lock", "none", "off", "django-pool", "chooser"))
    assert matrix.valid(Combination("drf", "pg-lease", "redis", "on", "pgbouncer", "one"))


def test_the_committed_table_lists_the_matrix_of_the_code() -> None:
    listed = matrix.rows_of(matrix.TABLE.read_text())
    assert listed == [astuple(c) for c in matrix.pairwise()], (
        "docs/_generated/conformance.rst is stale: run the tiers with "
        "IDEMPOTENCY_CONFORMANCE_RESULTS=PATH, then python -m tests.conformance.matrix PATH"
    )


def test_the_table_reads_back_its_results(tmp_path: Any) -> None:
    combination = matrix.pairwise()[0]
    results = tmp_path / "results.jsonl"
    matrix.record(str(results), combination, "10 passed")
    text = matrix.table([combination], matrix.read_results(results))
    assert matrix.rows_of(text) == [astuple(combination)]
    assert "10 passed" in text


def _tier() -> tuple[str, str, str]:
    layout = "chooser" if "shard1" in connections.settings else "one"
    return matrix.current_tier(connection.vendor, layout)


@contextmanager
def _atomic_requests(on: bool) -> Iterator[None]:
    # Every thread's connection shares this dict: Django reads it on each request.
    saved = {
        alias: connections.settings[alias].get("ATOMIC_REQUESTS", False) for alias in connections
    }
    for alias in connections:
        connections.settings[alias]["ATOMIC_REQUESTS"] = on
    try:
        yield
    finally:
        for alias, value in saved.items():
            connections.settings[alias]["ATOMIC_REQUESTS"] = value


def _executions() -> int:
    aliases = [a for a in ("default", "shard1") if a in connections.settings]
    return sum(Charge.objects.using(alias).count() for alias in aliases)


def _callers(django_user_model: Any) -> tuple[Client, Client]:
    # Under the chooser (tests.multidb), X-Tenant picks the database: one caller on each.
    first = Client(headers={"X-API-Key": "key-alice", "X-Tenant": "b-conformance"})
    first.force_login(django_user_model.objects.create(username="matrix-a"))
    second = Client(headers={"X-API-Key": "key-bob", "X-Tenant": "a-conformance"})
    second.force_login(django_user_model.objects.create(username="matrix-b"))
    return first, second


@pytest.mark.urls("tests.conformance.urls")
@pytest.mark.django_db(transaction=True, databases="__all__")
@pytest.mark.parametrize("combination", matrix.selected(), ids=lambda c: c.id)
def test_the_combination_keeps_the_contract(
    combination: Combination, request: pytest.FixtureRequest, settings: Any, django_user_model: Any
) -> None:
    if combination.tier() != _tier():
        pytest.skip(f"runs in the {'/'.join(combination.tier())} tier")
    settings.IDEMPOTENCY_CONFORMANCE_HOOKS = True
    if combination.database in PROTOCOLS:
        settings.IDEMPOTENCY_PROTOCOL = PROTOCOLS[combination.database]
    if combination.cache == "redis":
        request.getfixturevalue("redis_url")
        settings.IDEMPOTENCY_CACHE = "replay"
    first, second = _callers(django_user_model)
    with _atomic_requests(combination.atomic == "on"):
        results = run_conformance(
            first, matrix.PATHS[combination.adapter], other_client=second, executions=_executions
        )
    passed = sum(r.verdict == PASS for r in results)
    summary = f"{passed}/{len(results)} passed"
    if os.environ.get("IDEMPOTENCY_CONFORMANCE_RESULTS"):
        matrix.record(os.environ["IDEMPOTENCY_CONFORMANCE_RESULTS"], combination, summary)
    assert passed == len(results), [r for r in results if r.verdict != PASS]


def test_a_combination_names_its_options() -> None:
    combination = matrix.SEEDS[0]
    assert combination.id.split("-")[0] == "drf"
    assert [f.name for f in fields(combination)][-1] == "layout"
