"""DRF throttles spend no budget on a replay or an in-flight 409 (issue 24).

The issue's case: an ``IdempotentMixin`` view with a 1/min ``AnonRateThrottle``:
the first POST 201, its retry with the same key replayed (not 429), and again.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from adrf.views import APIView as AsyncAPIView
from django.core.cache import cache
from django.db import connections
from django.test import Client
from django.urls import path
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import AnonRateThrottle, BaseThrottle
from rest_framework.views import APIView

from idempotency_django.rest_framework import IdempotentMixin
from tests.helpers import new_key
from tests.testapp.models import Charge

pytestmark = [
    pytest.mark.faces,
    pytest.mark.django_db(transaction=True),
    pytest.mark.urls(__name__),
]


def amount_of(request: Request) -> int:
    data: Any = request.data
    return int(data["amount"])


class OnePerMinute(AnonRateThrottle):
    rate = "1/min"


class ThrottledCharges(IdempotentMixin, APIView):
    authentication_classes = ()
    permission_classes = ()
    throttle_classes: Sequence[type[BaseThrottle]] = (OnePerMinute,)

    def get(self, request: Request) -> Response:
        return Response({"charges": Charge.objects.count()})

    def post(self, request: Request) -> Response:
        charge = Charge.objects.create(reference=new_key(), amount=amount_of(request))
        return Response({"id": charge.pk}, status=201)


class TwoPerMinute(AnonRateThrottle):
    rate = "2/min"


entered, release = threading.Event(), threading.Event()


class SlowCharges(ThrottledCharges):
    throttle_classes: Sequence[type[BaseThrottle]] = (TwoPerMinute,)

    def post(self, request: Request) -> Response:
        if amount_of(request) == 99:  # held in flight until the test lets it go
            entered.set()
            assert release.wait(30)
        return super().post(request)


class AsyncThrottledCharges(IdempotentMixin, AsyncAPIView):  # type: ignore[misc]
    """adrf: an ``async def`` handler, throttled the same way."""

    authentication_classes = ()
    permission_classes = ()
    throttle_classes: Sequence[type[BaseThrottle]] = (OnePerMinute,)

    async def post(self, request: Request) -> Response:
        charge = await Charge.objects.acreate(reference=new_key(), amount=amount_of(request))
        return Response({"id": charge.pk}, status=201)


urlpatterns = [
    path("throttled/", ThrottledCharges.as_view()),
    path("slow/", SlowCharges.as_view()),
    path("async-throttled/", AsyncThrottledCharges.as_view()),
]


@pytest.fixture(autouse=True)
def _empty_throttle_history() -> Iterator[None]:
    cache.clear()
    yield
    cache.clear()


def post(client: Client, key: str, amount: int = 5, url: str = "/throttled/") -> Any:
    return client.post(
        url, {"amount": amount}, content_type="application/json", HTTP_IDEMPOTENCY_KEY=key
    )


@pytest.mark.parametrize("url", ["/throttled/", "/async-throttled/"])
def test_a_retry_of_a_stored_answer_is_replayed_not_throttled(client: Client, url: str) -> None:
    key = new_key()
    first = post(client, key, url=url)
    assert first.status_code == 201
    for _ in range(2):
        retry = post(client, key, url=url)
        assert retry.status_code == 201, retry.content
        assert retry["Idempotent-Replayed"] == "true"
        assert retry.content == first.content
    assert Charge.objects.count() == 1
    assert post(client, new_key(), url=url).status_code == 429  # new work spends the budget


def test_an_in_flight_409_spends_no_budget(client: Client) -> None:
    key, answers = new_key(), []
    entered.clear()
    release.clear()

    def first_request() -> None:
        try:
            answers.append(post(Client(), key, 99, "/slow/"))
        finally:
            connections.close_all()  # this thread's connection, before the test database goes

    first = threading.Thread(target=first_request)
    first.start()  # spends the first of two requests a minute
    try:
        assert entered.wait(30)
        for _ in range(2):
            assert post(client, key, 99, "/slow/").status_code == 409
    finally:
        release.set()
        first.join(30)
    assert [answer.status_code for answer in answers] == [201]
    # After the first (SQLite lets one writer at a time): the 409s left the second slot.
    assert post(client, new_key(), 5, "/slow/").status_code == 201
    assert post(client, new_key(), 5, "/slow/").status_code == 429


def test_a_422_spends_no_budget(client: Client) -> None:
    key = new_key()
    assert post(client, key, amount=5).status_code == 201
    cache.clear()  # a fresh minute
    assert post(client, key, amount=6).status_code == 422
    assert post(client, new_key()).status_code == 201


def test_a_throttled_request_is_not_stored_and_runs_later(client: Client) -> None:
    assert post(client, new_key()).status_code == 201
    key = new_key()
    refused = post(client, key)
    assert refused.status_code == 429
    assert "Retry-After" in refused
    assert Charge.objects.count() == 1
    cache.clear()  # the minute has passed
    assert post(client, key).status_code == 201
    assert Charge.objects.count() == 2


def test_safe_methods_are_throttled_as_before(client: Client) -> None:
    assert client.get("/throttled/").status_code == 200
    assert client.get("/throttled/").status_code == 429


def test_an_async_handler_is_throttled_first_too() -> None:
    """adrf's ``async def`` handlers: the same order, the check run off the event loop."""
    import asyncio

    from idempotency_django._adapters import throttling

    order: list[str] = []

    class View(APIView):
        def check_throttles(self, request: Request) -> None:
            order.append(f"throttles, deferred={throttling.deferred(self)}")

    async def handler(request: Request) -> str:
        order.append("handler")
        return "answer"

    view = View()
    throttling.defer(view)
    checked = throttling.throttled_first(view, handler)
    assert asyncio.iscoroutinefunction(checked)
    assert asyncio.run(checked(None)) == "answer"
    assert order == ["throttles, deferred=False", "handler"]
