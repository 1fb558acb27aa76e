"""The sample project's GraphQL endpoint (``/graphql/``), and docs/graphql.rst's example run as shown."""

from __future__ import annotations

import ast
import builtins
import json
import re
import shlex
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from sample_project.payments.models import Charge
from tests.helpers import new_key
from tests.test_docs_examples import DOCS, _names

pytestmark = [pytest.mark.faces, pytest.mark.django_db, pytest.mark.urls("sample_project.urls")]


def curl_example() -> tuple[str, dict[str, str], str]:
    """The page's ``curl`` command: its path, headers and body, as a shell would pass them."""
    text = (DOCS / "graphql.rst").read_text()
    (block,) = re.findall(r"\.\. code-block:: sh\n\n((?: {4}.*\n)+)", text)
    words = shlex.split(block.replace("\\\n", " "))
    url = next(word for word in words if word.startswith("http://"))
    headers = dict(words[i + 1].split(": ", 1) for i, word in enumerate(words) if word == "-H")
    body = words[words.index("-d") + 1]
    return url.removeprefix("http://127.0.0.1:8000"), headers, body


def post(path: str, headers: dict[str, str], body: str, client: Client | None = None) -> Any:
    extra = {name: value for name, value in headers.items() if name != "Content-Type"}
    response = (client or Client()).post(
        path, body, content_type=headers["Content-Type"], headers=extra
    )
    assert response.status_code == 200
    return response


def test_the_pages_curl_example_charges_once_and_replays() -> None:
    path, headers, body = curl_example()
    first = post(path, headers, body)
    retry = post(path, headers, body)
    payload = json.loads(first.content)["data"]["checkout"]
    assert payload["errors"] == []
    assert payload["charge"]["amount"] == 500
    assert retry.content == first.content
    assert Charge.objects.count() == 1


def test_the_example_on_the_async_endpoint_and_the_async_resolver() -> None:
    path, headers, body = curl_example()
    asynchronous = body.replace("checkout(", "checkoutAsync(")
    for query in (body, asynchronous):
        key = {**headers, "Idempotency-Key": new_key()}
        first = post(f"{path}async/", key, query)
        assert post(f"{path}async/", key, query).content == first.content
    assert Charge.objects.count() == 2


def test_a_refused_amount_is_a_user_error_stored_and_replayed() -> None:
    path, headers, body = curl_example()
    refused = body.replace("amount: 500", "amount: 0")
    first = post(path, headers, refused)
    assert json.loads(first.content)["data"]["checkout"]["errors"] == [
        {"field": "amount", "message": "must be positive"}
    ]
    assert post(path, headers, refused).content == first.content
    assert Charge.objects.count() == 0


def test_a_signed_in_caller_charges_in_their_own_key_space() -> None:
    path, headers, body = curl_example()
    client = Client()
    client.force_login(get_user_model().objects.create_user("carol"))
    post(path, headers, body, client)
    post(path, headers, body)  # anonymous, same key: another caller
    assert Charge.objects.filter(user__username="carol").count() == 1
    assert Charge.objects.count() == 2


@pytest.mark.parametrize("example", ["graphql_api.py", "graphene_api.py"])
def test_the_page_shows_its_examples_whole(example: str) -> None:
    """The page shows docs/examples/ (the quick start's app), no longer the sample's module,
    and each whole: every name it uses is shown with it."""
    text = (DOCS / "graphql.rst").read_text()
    included = re.search(
        rf"\.\. literalinclude:: examples/{re.escape(example)}\n((?:   :.*\n)*)", text
    )
    assert included, f"docs/graphql.rst no longer includes docs/examples/{example}"
    assert not re.search(r":(start-at|end-before|pyobject|lines):", included.group(1))
    defined, used = _names(ast.parse((DOCS / "examples" / example).read_text()))
    missing = used - defined - set(dir(builtins))
    assert not missing, f"docs/examples/{example} uses {missing} without defining them"
