"""A double-click under real concurrency (PostgreSQL, MariaDB): N posts of one rendered form,
racing on real threads, leave one row, and every one of them gets the same redirect."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from idempotency_django.forms import FIELD_NAME
from tests.helpers import race
from tests.test_forms import BROWSER, rendered_key
from tests.testapp.models import Charge

pytestmark = [
    pytest.mark.requires_server,
    pytest.mark.django_db(transaction=True),
    pytest.mark.urls("tests.testapp.form_views"),
]

RACERS = 8


@pytest.fixture(
    params=[pytest.param("lock", marks=pytest.mark.requires_postgres), "lease"], autouse=True
)
def protocol(request: pytest.FixtureRequest, settings: Any) -> str:
    settings.IDEMPOTENCY_PROTOCOL = request.param
    return str(request.param)


def test_concurrent_posts_of_one_rendered_form_make_one_row_and_one_redirect() -> None:
    browser = Client()
    key = rendered_key(browser, "/forms/charge/")  # the page, rendered once
    cookies = browser.cookies  # the visitor's session: one person clicking N times
    body = {"csrfmiddlewaretoken": "t", "reference": "double-click", "amount": "5", FIELD_NAME: key}

    def click(_index: int) -> Any:
        client = Client(raise_request_exception=False)
        client.cookies = cookies
        return client.post("/forms/racing/", body, HTTP_ACCEPT=BROWSER)

    responses = race(RACERS, click)
    assert [r.status_code for r in responses] == [302] * RACERS, responses
    assert len({r["Location"] for r in responses}) == 1
    assert sum("Idempotent-Replayed" not in r for r in responses) == 1
    assert Charge.objects.filter(reference="double-click").count() == 1
