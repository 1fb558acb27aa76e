"""``idempotency_django.contrib.prometheus``: the metrics moved by the signals, and ``/metrics``."""

from __future__ import annotations

import importlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import Client, override_settings
from prometheus_client import REGISTRY, CollectorRegistry

from idempotency_django import signals
from idempotency_django.contrib.prometheus import collectors
from idempotency_django.contrib.prometheus import metrics as prometheus_metrics
from idempotency_django.contrib.prometheus.apps import PrometheusConfig
from idempotency_django.contrib.prometheus.metrics import Metrics
from idempotency_django.contrib.prometheus.views import SCRAPE_TIME
from idempotency_django.contrib.prometheus.views import registry as view_registry
from tests.helpers import new_key, post


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def connected(registry: CollectorRegistry) -> Iterator[Metrics]:
    metrics = Metrics(registry)
    metrics.connect()
    yield metrics
    metrics.disconnect()


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
        "key_digest": signals.key_digest("", "k"),
    }
    signals.send(signals.outcome, sender, **(fields | overrides))


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    found = registry.get_sample_value(name, labels)
    assert found is not None, f"no sample {name}{labels}"
    return found


def test_requests_are_counted_by_outcome_method_and_route(
    registry: CollectorRegistry, connected: Metrics
) -> None:
    outcome()
    outcome()
    outcome(outcome=signals.REPLAYED, stored=None, source="cache", claim_seconds=None)
    outcome(outcome=signals.KEY_REUSED, status=422, stored=None, method="PUT")
    total = "idempotency_requests_total"
    assert value(registry, total, outcome="executed", method="POST", route="create-charge") == 2
    assert value(registry, total, outcome="replayed", method="POST", route="create-charge") == 1
    assert value(registry, total, outcome="key_reused", method="PUT", route="create-charge") == 1


def test_labels_never_carry_the_key_or_the_tenant(
    registry: CollectorRegistry, connected: Metrics
) -> None:
    for name in sorted(signals.OUTCOMES):
        outcome(outcome=name, key_digest=signals.key_digest("tenant-7", "secret-key"))
    text = "\n".join(
        f"{sample.labels}" for family in registry.collect() for sample in family.samples
    )
    assert "secret-key" not in text
    assert "tenant-7" not in text
    assert signals.key_digest("tenant-7", "secret-key") not in text
    labels = {
        label
        for family in registry.collect()
        for sample in family.samples
        for label in sample.labels
    }
    bounded = {"outcome", "method", "route", "kind", "protocol", "how", "operation", "source"}
    assert labels <= {*bounded, "le"}


def test_claim_and_request_durations(registry: CollectorRegistry, connected: Metrics) -> None:
    outcome(claim_seconds=0.002, total_seconds=0.02)
    outcome(protocol="lease", claim_seconds=0.0004, total_seconds=0.5)
    outcome(outcome=signals.KEY_MISSING, protocol=None, claim_seconds=None, total_seconds=0.0001)
    assert value(registry, "idempotency_claim_seconds_count", protocol="lock") == 1
    assert value(registry, "idempotency_claim_seconds_sum", protocol="lease") == 0.0004
    assert value(registry, "idempotency_claim_seconds_bucket", protocol="lease", le="0.0005") == 1
    assert value(registry, "idempotency_request_seconds_count", outcome="executed") == 2
    assert value(registry, "idempotency_request_seconds_count", outcome="key_missing") == 1


def test_tasks_and_calls_have_their_own_counter(
    registry: CollectorRegistry, connected: Metrics
) -> None:
    outcome("task", method=None, route=None, status=None)
    outcome("call", method=None, route=None, status=None, outcome=signals.REPLAYED)
    outcome("call", method=None, route=None, status=None, outcome=signals.REPLAYED)
    assert value(registry, "idempotency_calls_total", kind="task", outcome="executed") == 1
    assert value(registry, "idempotency_calls_total", kind="call", outcome="replayed") == 2
    assert (
        registry.get_sample_value("idempotency_request_seconds_count", {"outcome": "executed"})
        is None
    )
    assert value(registry, "idempotency_claim_seconds_count", protocol="lock") == 3


def test_reclaimed_purged_and_cache_errors(registry: CollectorRegistry, connected: Metrics) -> None:
    assert value(registry, "idempotency_reclaimed_total", how="purge") == 0
    signals.send(signals.entry_reclaimed, "store", how="takeover", count=1, database="default")
    signals.send(signals.entry_reclaimed, "purge", how="purge", count=4, database="default")
    purge = {"database": "default", "seconds": 0.1}
    signals.send(signals.purge_finished, "purge", expired=7, abandoned=4, dry_run=False, **purge)
    signals.send(signals.purge_finished, "purge", expired=50, abandoned=50, dry_run=True, **purge)
    for operation in ("get", "get", "set"):
        signals.send(signals.cache_failed, "cache", alias="replay", operation=operation, error=None)
    assert value(registry, "idempotency_reclaimed_total", how="takeover") == 1
    assert value(registry, "idempotency_reclaimed_total", how="purge") == 4
    assert value(registry, "idempotency_purged_total", kind="expired") == 7
    assert value(registry, "idempotency_purged_total", kind="abandoned") == 4
    assert value(registry, "idempotency_purge_last_run_timestamp_seconds") > 0
    assert value(registry, "idempotency_cache_errors_total", operation="get") == 2
    assert value(registry, "idempotency_cache_errors_total", operation="set") == 1


def test_a_dry_run_moves_nothing(registry: CollectorRegistry, connected: Metrics) -> None:
    signals.send(signals.purge_finished, "purge", expired=5, abandoned=1, dry_run=True)
    assert value(registry, "idempotency_purged_total", kind="expired") == 0
    assert value(registry, "idempotency_purge_last_run_timestamp_seconds") == 0


def test_disconnected_metrics_stay_still(registry: CollectorRegistry) -> None:
    metrics = Metrics(registry)
    metrics.connect()
    metrics.connect()
    outcome()
    metrics.disconnect()
    outcome()
    total = "idempotency_requests_total"
    assert value(registry, total, outcome="executed", method="POST", route="create-charge") == 1


def test_off_unless_installed() -> None:
    prefix = prometheus_metrics.__name__
    assert not any(str(lookup[0]).startswith(prefix) for lookup, *_ in signals.outcome.receivers)


def test_the_app_connects_the_default_registry() -> None:
    config = PrometheusConfig(
        "idempotency_django.contrib.prometheus",
        importlib.import_module("idempotency_django.contrib.prometheus"),
    )
    config.ready()
    try:
        labels = {"outcome": "executed", "method": "POST", "route": "app-ready-test"}
        before = REGISTRY.get_sample_value("idempotency_requests_total", labels) or 0
        outcome(route="app-ready-test")
        assert REGISTRY.get_sample_value("idempotency_requests_total", labels) == before + 1
    finally:
        prometheus_metrics.default_metrics().disconnect()
        forget_default_gauges()


def forget_default_gauges() -> None:
    """Undo ``ready()``'s registration of the scrape-time gauges in the default registry."""
    collector = collectors._registered.pop(REGISTRY)
    REGISTRY.unregister(collector)
    SCRAPE_TIME.remove(collector)


@pytest.mark.django_db
@override_settings(ROOT_URLCONF="sample_project.urls", ALLOWED_HOSTS=["*"])
def test_the_sample_counts_the_readme_curl_sent_twice() -> None:
    """What ``make run`` shows: the counters of /metrics move with each answer."""
    client, key = Client(), new_key()
    metrics = prometheus_metrics.connect()
    try:
        before = exported(client)
        for _ in range(2):
            post(client, "/charges/", key, {"amount": 1000, "currency": "eur"})
        after = exported(client)
    finally:
        metrics.disconnect()
    for outcome_name in ("executed", "replayed"):
        series = (
            "idempotency_requests_total"
            f'{{method="POST",outcome="{outcome_name}",route="create-charge"}}'
        )
        assert after[series] == before.get(series, 0) + 1


def exported(client: Client) -> dict[str, float]:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")
    lines = response.content.decode().splitlines()
    return {
        series: float(value)
        for series, _, value in (line.rpartition(" ") for line in lines)
        if series.startswith("idempotency_")
    }


@override_settings(ROOT_URLCONF="sample_project.urls", ALLOWED_HOSTS=["*"])
def test_metrics_view_refuses_unsafe_methods() -> None:
    assert Client().post("/metrics").status_code == 405


def test_multiprocess_mode_merges_the_workers_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    merged = view_registry()
    assert merged is not REGISTRY
    assert list(merged.collect()) == []


def test_importing_the_package_imports_no_prometheus() -> None:
    code = (
        "import sys\n"
        "sys.modules['prometheus_client'] = None\n"
        "sys.modules['opentelemetry'] = None\n"
        "import django; from django.conf import settings\n"
        "settings.configure(INSTALLED_APPS=['idempotency_django'], DATABASES={})\n"
        "django.setup()\n"
        "import idempotency_django._operations.log, idempotency_django.signals, idempotency_django.contrib\n"
        "print('ok')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert result.stdout.strip() == "ok", result.stderr
