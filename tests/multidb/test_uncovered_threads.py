"""The write guard (``UncoveredWrite``) sees a protected view's writes from a worker
thread that carries the view's context (``sync_to_async(thread_sensitive=False)``,
``asyncio.to_thread``, ``contextvars.copy_context().run``): to another database, and to
the entries' own database, which a worker thread reaches through a connection of its
own, outside the transaction that holds the claim.

A plain ``threading.Thread`` starts without the view's context: its writes are not
seen (docs/operations.rst says so).
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.db import connections
from django.http import HttpRequest, JsonResponse
from django.test import Client
from django.urls import path

from idempotency_django import databases, idempotent
from tests.helpers import new_key
from tests.testapp.models import Charge

pytestmark = [
    pytest.mark.django_db(transaction=True, databases=["default", "shard1"]),
    pytest.mark.urls(__name__),
]


def _in_a_worker(write: Callable[[], None], how: str) -> None:
    if how == "copy_context":
        with ThreadPoolExecutor(1) as pool:
            pool.submit(contextvars.copy_context().run, write).result()
    else:
        async_to_sync(sync_to_async(write, thread_sensitive=False))()


@idempotent(database="default")
def write_from_a_worker(request: HttpRequest) -> JsonResponse:
    alias, reference = request.headers["X-Alias"], request.headers["X-Ref"]

    def write() -> None:
        try:
            Charge.objects.using(alias).create(reference=reference, amount=1)
        finally:
            connections.close_all()  # this worker thread's own

    _in_a_worker(write, request.headers["X-How"])
    return JsonResponse({}, status=201)


def _driver_guarded(conn: Any) -> bool:
    if conn.vendor == "sqlite":
        return hasattr(conn, "_idempotency_authorized")
    attribute = "cursorclass" if conn.vendor == "mysql" else "cursor_factory"
    return hasattr(getattr(conn.connection, attribute), "_idempotency_unguarded")


@idempotent(database="default")
def connect_from_a_worker(request: HttpRequest) -> JsonResponse:
    seen: list[bool] = []

    def connect() -> None:
        try:
            conn = connections["shard1"]
            conn.ensure_connection()  # a new connection, this worker thread's own
            seen.append(_driver_guarded(conn))
        finally:
            connections.close_all()

    _in_a_worker(connect, "copy_context")
    return JsonResponse({"guarded": seen[0]}, status=201)


@idempotent(database="default")
def plain(request: HttpRequest) -> JsonResponse:
    return JsonResponse({}, status=201)


@idempotent(database="default")
def read_through_an_alias_opened_meanwhile(request: HttpRequest) -> JsonResponse:
    conn = connections["default"].copy(alias="adhoc")  # not in DATABASES when the view began
    try:
        with conn.cursor() as cursor:
            cursor.execute("SELECT 1")
    finally:
        conn.close()
    return JsonResponse({}, status=201)


urlpatterns = [
    path("worker/", write_from_a_worker),
    path("connect/", connect_from_a_worker),
    path("plain/", plain),
    path("adhoc/", read_through_an_alias_opened_meanwhile),
]


def _post(key: str, alias: str, how: str, client: Client | None = None) -> object:
    return (client or Client()).post(
        "/worker/",
        "{}",
        content_type="application/json",
        headers={"Idempotency-Key": key, "X-Ref": key, "X-Alias": alias, "X-How": how},
    )


@pytest.mark.parametrize("how", ["copy_context", "sync_to_async"])
@pytest.mark.parametrize("alias", ["shard1", "default"])
def test_a_write_from_a_worker_thread_carrying_the_context_is_refused(alias: str, how: str) -> None:
    key = new_key()
    with pytest.raises(databases.UncoveredWrite, match=f"'{alias}'"):
        _post(key, alias, how)
    assert not Charge.objects.using(alias).filter(reference=key).exists()


def test_in_production_a_worker_threads_write_runs_and_is_reported(
    reported_uncovered: list[str],
) -> None:
    key = new_key()
    response = _post(key, "shard1", "copy_context", Client(raise_request_exception=False))
    assert response.status_code == 201  # type: ignore[attr-defined]
    assert reported_uncovered == ["shard1"]
    assert Charge.objects.using("shard1").filter(reference=key).exists()


def test_the_claims_own_connection_is_not_watched() -> None:
    """The view's writes on its entries' database, in its own thread, are the covered ones."""
    key = new_key()
    with databases.watching("default"):
        Charge.objects.using("default").create(reference=key, amount=1)
    assert Charge.objects.filter(reference=key).exists()


def test_a_worker_threads_new_connection_is_not_left_guarded() -> None:
    """The driver-cursor guard stays in the view's thread: a worker's connection is its
    own, and the view could not put it back when it ends (it once stayed guarded)."""
    response = Client().post(
        "/connect/", "{}", content_type="application/json", headers={"Idempotency-Key": new_key()}
    )
    assert response.status_code == 201
    assert response.json() == {"guarded": False}


def test_a_users_execute_wrapper_around_the_view_is_the_one_it_removes() -> None:
    """Django's execute_wrapper() pops the last wrapper: a request wrapped by a user's
    (a query-logging middleware) leaves the list as it found it, request after request."""
    conn = connections["shard1"]
    # As on a connection no protected view has used yet (a test before may have).
    conn.execute_wrappers[:] = [w for w in conn.execute_wrappers if w is not databases._hook]
    before = list(conn.execute_wrappers)

    def logger(execute: Any, sql: Any, params: Any, many: bool, context: Any) -> Any:
        return execute(sql, params, many, context)

    for _ in range(3):
        with conn.execute_wrapper(logger):
            assert _post_plain("/plain/").status_code == 201  # type: ignore[attr-defined]
    assert conn.execute_wrappers == before


def test_a_connection_under_an_alias_opened_during_the_view_is_watched_not_broken() -> None:
    assert _post_plain("/adhoc/").status_code == 201  # type: ignore[attr-defined]


def _post_plain(url: str) -> object:
    return Client().post(
        url, "{}", content_type="application/json", headers={"Idempotency-Key": new_key()}
    )
