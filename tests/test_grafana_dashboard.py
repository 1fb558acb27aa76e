"""The Grafana dashboard shipped in the package imports (Grafana's dashboard JSON model)
and queries only metrics the exporter emits; so do the documented alert rules.

The names are read from a scrape of the exporter (the text ``/metrics`` answers) after
real traffic: a renamed metric, or a series that never appears, fails here.
"""

from __future__ import annotations

import json
import re
from itertools import combinations
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.db import transaction
from django.test import Client
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import idempotency_django
from idempotency_django import idempotent_call, signals
from idempotency_django.contrib.prometheus import collectors
from idempotency_django.contrib.prometheus.metrics import Metrics
from idempotency_django.outbox import enqueue
from idempotency_django.outbox import prometheus as outbox_prometheus
from tests.helpers import new_key, post

pytestmark = pytest.mark.django_db

DASHBOARD = Path(idempotency_django.__file__).parent / "contrib/prometheus/grafana-dashboard.json"
ALERTS = Path(__file__).resolve().parent.parent / "docs" / "monitoring-alerts.yml"
GRID_WIDTH = 24  # Grafana's grid is 24 columns wide
PANEL_TYPES = {"timeseries", "stat", "gauge", "bargauge", "table", "text", "row"}
METRIC = re.compile(r"\bidempotency_[a-z_]+\b")
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}


def load() -> dict[str, Any]:
    found: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return found


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return load()


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = dashboard["panels"]
    return found


def test_the_dashboard_has_grafanas_top_level_fields(dashboard: dict[str, Any]) -> None:
    assert isinstance(dashboard["schemaVersion"], int)
    assert dashboard["schemaVersion"] >= 36
    assert dashboard["title"]
    assert dashboard["uid"] == "idempotency-django"
    assert "id" not in dashboard or dashboard["id"] is None  # Grafana assigns it on import
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"


def test_every_panel_is_complete_and_queries_the_chosen_datasource(
    dashboard: dict[str, Any],
) -> None:
    ids = [panel["id"] for panel in panels(dashboard)]
    assert len(ids) == len(set(ids))
    assert all(isinstance(i, int) for i in ids)
    for panel in panels(dashboard):
        assert panel["type"] in PANEL_TYPES, panel
        assert panel["title"], panel
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        refs = [target["refId"] for target in panel["targets"]]
        assert refs, panel["title"]
        assert len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"]
            assert METRIC.search(target["expr"]), (panel["title"], target["expr"])


def box(panel: dict[str, Any]) -> tuple[int, int, int, int]:
    grid = panel["gridPos"]
    assert all(isinstance(grid[k], int) for k in "hwxy")
    assert grid["w"] > 0
    assert grid["h"] > 0
    assert grid["x"] >= 0
    assert grid["y"] >= 0
    assert grid["x"] + grid["w"] <= GRID_WIDTH, panel["title"]
    return grid["x"], grid["y"], grid["x"] + grid["w"], grid["y"] + grid["h"]


def overlap(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def test_no_two_panels_overlap(dashboard: dict[str, Any]) -> None:
    boxes = {panel["title"]: box(panel) for panel in panels(dashboard)}
    assert len(boxes) == len(panels(dashboard))  # titles unique too
    clashes = [(a, b) for (a, ra), (b, rb) in combinations(boxes.items(), 2) if overlap(ra, rb)]
    assert clashes == []


def test_overlap_sees_a_shared_cell_and_not_a_shared_edge() -> None:
    assert overlap((0, 0, 12, 8), (11, 7, 20, 9))
    assert not overlap((0, 0, 12, 8), (12, 0, 24, 8))
    assert not overlap((0, 0, 12, 8), (0, 8, 12, 16))


@pytest.fixture
def scraped(client: Client) -> dict[str, str]:
    """The exporter's output after traffic: every sample name, and its family's type."""
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    collectors.register(registry)
    outbox_prometheus.register(registry)
    metrics.connect()
    try:
        traffic(client)
        text = generate_latest(registry).decode()
    finally:
        metrics.disconnect()
    return {
        sample.name: family.type
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def traffic(client: Client) -> None:
    key = new_key()
    for _ in range(2):  # executed, then replayed
        assert post(client, "/charges/", key).status_code == 201
    assert post(client, "/charges/", key, {"amount": 5}).status_code == 422
    with idempotent_call(new_key(), scope="dashboard-test") as call:
        call.result = 1
    with transaction.atomic():
        enqueue("tests.receipt", key=new_key())
    signals.send(signals.dead_lettered, "consumer", key_digest="0", attempts=3, error=None)


def family(name: str, exported: dict[str, str]) -> str:
    """The type of the family exporting sample ``name``, its suffix checked against it."""
    kind = exported[name]
    suffixes = SUFFIXES.get(kind, ("",))
    assert any(name.endswith(s) for s in suffixes), f"{name} is a {kind}: ends with {suffixes}"
    return kind


def check_expr(expr: str, exported: dict[str, str]) -> None:
    used = set(METRIC.findall(expr))
    assert used, expr
    unknown = used - set(exported)
    assert not unknown, f"not in the exporter's output: {sorted(unknown)} ({expr})"
    for name in used:
        kind = family(name, exported)
        rated = re.search(rf"\b(rate|increase)\(\s*{name}\b", expr) is not None
        assert rated == (kind != "gauge"), (
            f"{name} ({kind}) used {'with' if rated else 'without'} rate() in {expr}"
        )


def test_every_metric_the_dashboard_queries_is_exported(
    dashboard: dict[str, Any], scraped: dict[str, str]
) -> None:
    for panel in panels(dashboard):
        for target in panel["targets"]:
            check_expr(target["expr"], scraped)


def test_the_dashboard_shows_what_an_operator_watches(dashboard: dict[str, Any]) -> None:
    exprs = " ".join(t["expr"] for p in panels(dashboard) for t in p["targets"])
    for name in (
        "idempotency_requests_total",
        "idempotency_calls_total",
        "idempotency_in_flight",
        "idempotency_in_flight_oldest_seconds",
        "idempotency_purge_lag_seconds",
        "idempotency_outbox_pending",
        "idempotency_outbox_dead",
        "idempotency_consumer_failing",
        "idempotency_dead_letters_total",
    ):
        assert re.search(rf"\b{name}\b", exprs), name
    assert 'outcome="replayed"' in exprs


def test_the_documented_alert_rules_query_exported_metrics(scraped: dict[str, str]) -> None:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    assert {rule["alert"] for rule in rules} >= {
        "IdempotencyKeyReuseRateHigh",
        "IdempotencyReclaimRateHigh",
        "IdempotencyPurgeLagging",
        "IdempotencyDeadLettersWaiting",
    }
    for rule in rules:
        check_expr(rule["expr"], scraped)
        for value in re.findall(r'outcome="([a-z_]+)"', rule["expr"]):
            assert value in signals.OUTCOMES


def test_a_renamed_metric_fails_the_check(scraped: dict[str, str]) -> None:
    with pytest.raises(AssertionError, match="not in the exporter's output"):
        check_expr("sum(rate(idempotency_request_total[5m]))", scraped)
    with pytest.raises(AssertionError, match="without rate"):
        check_expr("sum(idempotency_requests_total)", scraped)
    with pytest.raises(AssertionError, match="is a histogram"):
        family("idempotency_claim_seconds", {"idempotency_claim_seconds": "histogram"})
