"""The entries' database as a callable of the request, its checks, and the ATOMIC_REQUESTS
marker (the tier with several databases is tests/multidb)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.checks import run_checks
from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from django.http import HttpRequest, HttpResponse
from django.test import RequestFactory, override_settings

from idempotency_django import databases, idempotent
from idempotency_django._adapters.decorators import EntriesDatabase
from idempotency_django._operations.checks import check_database, check_wait_within_pool
from idempotency_django._protocol.options import Options
from idempotency_django.models import IdempotencyEntry

chosen: list[str] = []


def choose(request: HttpRequest) -> str:
    chosen.append(request.path)
    return "default"


def _request(key: str = "k-1") -> HttpRequest:
    request = RequestFactory().post(
        "/pay/",
        json.dumps({"a": 1}),
        content_type="application/json",
        headers={"Idempotency-Key": key},
    )
    request.user = type("U", (), {"is_authenticated": True, "pk": 7})()
    return request


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "option", [choose, "tests.test_databases.choose"], ids=["callable", "path"]
)
def test_the_setting_may_choose_per_request(option: Any) -> None:
    seen: list[str] = []

    @idempotent
    def view(request: HttpRequest) -> HttpResponse:
        seen.append(databases.default_alias())  # inside the view: the request's alias
        # One database: nothing to watch, no wrapper on the hot path.
        seen.extend(map(str, connections["default"].execute_wrappers))
        return HttpResponse("ok", status=201)

    chosen.clear()
    with override_settings(IDEMPOTENCY_DATABASE=option):
        assert view(_request()).status_code == 201
        assert view(_request())["Idempotent-Replayed"] == "true"
    assert chosen == ["/pay/", "/pay/"]
    assert seen == ["default"]
    assert IdempotencyEntry.objects.count() == 1


def test_the_option_takes_a_callable_not_another_type() -> None:
    assert Options.build(database=choose).database is choose
    with pytest.raises(TypeError, match="database"):
        Options.build(database=3)  # type: ignore[arg-type]


def test_outside_a_request_a_chooser_needs_the_database_named() -> None:
    with (
        override_settings(IDEMPOTENCY_DATABASE=choose),
        pytest.raises(Exception, match="name the database explicitly"),
    ):
        databases.default_alias()


def test_atomic_requests_marker_of_a_chooser_holds_every_possible_alias() -> None:
    marker = EntriesDatabase(Options.build(database=choose))
    assert "default" in marker
    assert set(marker) == set(databases.possible_aliases())
    assert set(EntriesDatabase(Options.build(database="default"))) == {"default"}


@pytest.mark.parametrize(
    ("value", "ids"),
    [
        ("default", []),
        (choose, []),
        ("tests.test_databases.choose", []),
        ("elsewhere", ["idempotency_django.E008"]),
        (3, ["idempotency_django.E008"]),
        ("tests.test_databases.missing", ["idempotency_django.E060"]),
        ("os.sep", ["idempotency_django.E060"]),  # imports, but not a callable
    ],
)
def test_database_setting_checks(value: Any, ids: list[str]) -> None:
    assert [m.id for m in check_database(value)] == ids


@pytest.mark.django_db
def test_a_bad_dotted_path_fails_manage_py_check() -> None:
    with override_settings(IDEMPOTENCY_DATABASE="nowhere.at_all"):
        assert "idempotency_django.E060" in [m.id for m in run_checks()]


@pytest.mark.parametrize(
    ("wait", "options", "warned"),
    [
        (40, {"pool": True}, True),  # psycopg_pool's checkout timeout: 30 s
        (30, {"pool": {"timeout": 30}}, True),
        (40, {"pool": {"timeout": 60}}, False),
        (0, {"pool": True}, False),
        (5, {"pool": True}, False),
        (90, {}, False),
        (90, None, False),
    ],
)
def test_w060_a_wait_that_outlasts_the_pools_checkout(
    wait: Any, options: Any, warned: bool
) -> None:
    ids = [m.id for m in check_wait_within_pool("default", wait, options)]
    assert ids == (["idempotency_django.W060"] if warned else [])


class _Executed:
    def __init__(self) -> None:
        self.sql: list[str] = []

    def __call__(self, sql: str, params: Any, many: bool, context: Any) -> str:
        self.sql.append(sql)
        return "ran"


def test_the_watch_refuses_a_write_before_it_runs_and_lets_reads_through() -> None:
    execute = _Executed()
    watch = databases._Watch("other", "default")
    assert watch(execute, "SELECT 1", None, False, {}) == "ran"
    with pytest.raises(databases.UncoveredWrite, match="'other'"):
        watch(execute, "INSERT INTO t VALUES (1)", None, False, {})
    assert execute.sql == ["SELECT 1"]
    assert watch.refused
    with databases.uncovered("other"):
        assert watch(execute, b"DELETE FROM t", None, False, {}) == "ran"


def test_in_production_the_watch_warns_once_per_request_and_signals(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from idempotency_django import signals

    monkeypatch.setattr(databases, "refusing", lambda: False)
    seen: list[Any] = []
    signals.uncovered_write.connect(receiver := lambda sender, **kw: seen.append(kw["alias"]))
    try:
        execute = _Executed()
        watch = databases._Watch("other", "default")
        for _ in range(2):
            assert watch(execute, "UPDATE t SET a = 1", None, False, {}) == "ran"
    finally:
        signals.uncovered_write.disconnect(receiver)
    assert seen == ["other"]
    assert len([r for r in caplog.records if "'other'" in r.getMessage()]) == 1


def test_watching_sets_the_views_alias_and_fails_a_view_that_swallowed_the_refusal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    swallowed = databases._Watch("other", "default")
    swallowed.refused = True
    monkeypatch.setattr(databases, "_Watch", lambda other, alias: swallowed)
    monkeypatch.setattr(databases, "connections", _FakeConnections())
    with pytest.raises(databases.UncoveredWrite), databases.watching("default"):
        assert databases.default_alias() == "default"
    assert databases._current.get() is None


class _FakeConnections:
    """``default`` and ``other``, each taking an execute wrapper."""

    def __iter__(self) -> Any:
        return iter(["default", "other"])

    def __getitem__(self, alias: str) -> Any:
        from contextlib import nullcontext

        wrapper = staticmethod(lambda w: nullcontext())
        # No driver connection of a kind whose cursors the watch could guard.
        fields = {"execute_wrapper": wrapper, "vendor": "fake", "connection": None}
        return type("C", (), {**fields, "execute_wrappers": []})()


@pytest.mark.django_db
def test_one_database_holds_the_entries_and_the_outbox() -> None:
    from idempotency_django.outbox.models import OutboxMessage

    assert databases.possible_aliases() == ["default"]
    assert databases.holding_aliases() == ["default"]
    assert databases.holding_aliases(OutboxMessage) == ["default"]
    assert databases.chosen_or_every(None) == ["default"]
    assert databases.chosen_or_every("default") == ["default"]


def test_a_chooser_needs_a_request_and_must_answer_an_alias() -> None:
    with pytest.raises(ImproperlyConfigured, match="name the database explicitly"):
        databases.entries_alias(choose, None)
    with pytest.raises(ImproperlyConfigured, match=r"<lambda> returned 'nowhere', not an alias"):
        databases.entries_alias(lambda request: "nowhere", _request())
    with pytest.raises(ImproperlyConfigured, match="is not callable"):
        databases.entries_alias("os.sep", _request())
    with pytest.raises(ImproperlyConfigured, match="can't be imported"):
        databases.entries_alias("tests.nowhere.choose", _request())
