"""A batch is what the stack reads it to be (issue 53, item 3: ``r201``).

The key-shared refusal spans a batch: it must read the batch as the stack does (graphene-django's
``parse_body`` and ``get_graphql_params``, Strawberry's ``parse_http_body``), never again on its
own. Two readings that differed let two checkouts run under one header key: the second was
answered the first's payment.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import AnonymousUser
from django.test import Client, RequestFactory

from tests.helpers import charges, new_key

pytestmark = [pytest.mark.faces, pytest.mark.django_db(transaction=True)]

CHECKOUT = "mutation { charge(reference: %s, amount: 5) { id reference } }"


def _graphene() -> None:
    pytest.importorskip("graphene_django")
    try:
        import tests.testapp.graphene_api  # noqa: F401
    except ImportError:  # pragma: no cover  (graphql-core 3.3)
        pytest.skip("Graphene does not import beside this graphql-core")


def _codes(answer: Any) -> list[str]:
    return [error["extensions"]["code"] for error in answer.get("errors") or []]


def _post(url: str, body: Any, key: str) -> list[Any]:
    response = Client().post(
        url, json.dumps(body), content_type="application/json", headers={"Idempotency-Key": key}
    )
    answers = json.loads(response.content)
    assert isinstance(answers, list), response.content
    return answers


def test_a_graphene_batch_item_named_null_is_counted_as_graphene_runs_it() -> None:
    """graphene-django reads ``"operationName": "null"`` as no name and runs the item; the
    check looked for an operation called "null", dropped the item, and both checkouts ran
    under one key: one payment, answered to both."""
    _graphene()
    reference = new_key()
    item = {"query": CHECKOUT % json.dumps(reference), "operationName": "null"}
    answers = _post("/graphene/batch/", [item, dict(item)], new_key())
    assert [_codes(answer) for answer in answers] == [["key-shared"], ["key-shared"]]
    assert charges(reference) == 0


def test_a_graphene_batch_whose_query_is_in_the_url_is_counted_as_graphene_runs_it() -> None:
    """graphene-django prefers the URL's ``query`` to each item's: every item runs it. The
    check read the items' queries only (no protected field) and let them all take the key."""
    _graphene()
    reference = new_key()
    url = "/graphene/batch/?" + urlencode({"query": CHECKOUT % json.dumps(reference)})
    answers = _post(url, [{"query": "{ ping }"}, {"query": "{ ping }"}], new_key())
    assert [_codes(answer) for answer in answers] == [["key-shared"], ["key-shared"]]
    assert charges(reference) == 0


def test_a_batch_no_routed_view_reads_takes_its_key_once() -> None:
    """A batch view called by hand (no URLconf match): nothing can read the batch before it
    runs, so each item is checked alone; the second item to take the header's key is refused
    (the first ran), never answered the first one's payment."""
    _graphene()
    from graphene_django.views import GraphQLView

    from idempotency_django.graphene import IdempotentExecutionContext
    from tests.testapp import graphene_api

    view = GraphQLView.as_view(
        schema=graphene_api.schema, batch=True, execution_context_class=IdempotentExecutionContext
    )
    first, second = new_key(), new_key()
    bodies = [{"query": CHECKOUT % json.dumps(first)}, {"query": CHECKOUT % json.dumps(second)}]
    request = RequestFactory().post(
        "/",
        json.dumps(bodies),
        content_type="application/json",
        headers={"Idempotency-Key": new_key()},
    )
    request.user = AnonymousUser()
    answers = json.loads(view(request).content)
    assert [_codes(answer) for answer in answers] == [[], ["key-shared"]]
    assert (charges(first), charges(second)) == (1, 0)


def test_a_batch_an_async_view_parses_by_waiting_takes_its_key_once() -> None:
    """An async Strawberry view whose parsing waits on something can't be asked before the
    batch runs: its items run together, and of two taking the header's key one runs and the
    other is refused."""
    first, second = new_key(), new_key()
    bodies = [{"query": CHECKOUT % json.dumps(first)}, {"query": CHECKOUT % json.dumps(second)}]
    answers = _post("/graphql/async/batch/waiting/", bodies, new_key())
    assert sorted(_codes(answer) for answer in answers) == [[], ["key-shared"]]
    assert charges(first) + charges(second) == 1


def test_an_unvalidated_document_spreading_an_unknown_fragment_is_read_as_graphql_core_runs_it() -> (
    None
):
    """graphql-core run without validation skips a spread of an unknown fragment: so does the
    check, and the protected field beside it runs once under the header's key."""
    import graphql
    from graphql import execute, parse

    from idempotency_django.strawberry import IdempotentExecutionContext
    from tests.testapp import strawberry_api

    reference = new_key()
    request = RequestFactory().post("/", headers={"Idempotency-Key": new_key()})
    request.user = AnonymousUser()
    document = parse(f'mutation {{ ...Missing charge(reference: "{reference}") {{ id }} }}')
    # graphql-core 3.3 names it executor_class (its ExecutionContext became Executor).
    kind = "executor_class" if hasattr(graphql, "Executor") else "execution_context_class"
    classes: dict[str, Any] = {kind: IdempotentExecutionContext}
    result = execute(
        strawberry_api.schema._schema,
        document,
        context_value=SimpleNamespace(request=request),
        **classes,
    )
    assert result.errors is None, result.errors  # type: ignore[union-attr]
    assert charges(reference) == 1
