"""The entries' database as a callable of the request, its checks, and the ATOMIC_REQUESTS
marker (the tier with several databases is tests/multidb)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.checks import run_checks
from django.db import connections
from django.http import HttpRequest, HttpResponse
from django.test import RequestFactory, override_settings

from idempotency_django import databases, idempotent
from idempotency_django.checks import check_database, check_wait_within_pool
from idempotency_django.conf import conf
from idempotency_django.decorators import EntriesDatabase
from idempotency_django.models import IdempotencyEntry
from idempotency_django.options import Options

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
        seen.append(conf.DATABASE)  # inside the view: the request's alias
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
        conf.DATABASE  # noqa: B018


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
