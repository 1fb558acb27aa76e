"""The GraphQL contract: documents of every shape, on every stack, answered as docs/graphql.rst
promises (issue 44: "GraphQL documents of every shape").

Each test runs over Strawberry (sync view; async view with a sync resolver; async view with
an ``async def`` resolver) and Graphene (graphene-django's sync view; ``execute_async``
with an ``async def mutate``) where the stack has the shape, and counts the effects in the
database. The schemas are ``tests/testapp/strawberry_api.py`` and ``graphene_api.py``:
``charge(reference, amount)`` at the root, ``account(id) { pay(reference, amount) }`` nested
(its charge is ``"{reference}:{id}"``), ``accounts(ids) { pay }`` under a list.
Runs on SQLite and, in the PostgreSQL pass, on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import AnonymousUser
from django.db import connections
from django.test import Client, RequestFactory

from idempotency_django._adapters.graphql_fields import DOCS
from idempotency_django.exceptions import PROBLEM_BASE
from idempotency_django.models import IdempotencyEntry
from tests.helpers import charges, new_key

pytestmark = [pytest.mark.faces, pytest.mark.django_db(transaction=True)]

Body = dict[str, Any]


@dataclass(frozen=True)
class Stack:
    """One way to execute a document: where it goes, and its protected fields' names."""

    name: str
    send: Callable[[Body | list[Body], str | None], Any]  # (body, header key) -> JSON answer
    root: str  # a protected root mutation: charge(reference, amount)
    nested: str  # a protected field of AccountOps: pay(reference, amount)
    batches: bool


def _view(url: str) -> Callable[[Body | list[Body], str | None], Any]:
    def send(body: Body | list[Body], header: str | None) -> Any:
        headers = {} if header is None else {"Idempotency-Key": header}
        response = Client().post(
            url, json.dumps(body), content_type="application/json", headers=headers
        )
        answer = json.loads(response.content)
        # graphene-django answers 400 to a document whose data is null (a refusal).
        assert response.status_code == 200 or "errors" in str(answer), response.content
        return answer

    return send


def _graphene_async(body: Body | list[Body], header: str | None) -> Any:
    """``Schema.execute_async`` with the request as the context (no async Django view)."""
    from idempotency_django.graphene import IdempotentExecutionContext
    from tests.testapp import graphene_api

    assert isinstance(body, dict), "execute_async runs one document"
    headers = {} if header is None else {"Idempotency-Key": header}
    request = RequestFactory().post("/graphene/", headers=headers)
    request.user = AnonymousUser()
    try:
        result = asyncio.run(
            graphene_api.schema.execute_async(
                body["query"],
                variables=body.get("variables"),
                context_value=request,
                execution_context_class=IdempotentExecutionContext,
            )
        )
    finally:  # the claim ran in asgiref's shared thread: close its connection there
        asyncio.run(sync_to_async(connections.close_all)())
    return result.formatted


def _stacks() -> list[Any]:
    stacks = [
        Stack("strawberry-sync", _view("/graphql/"), "charge", "pay", True),
        Stack("strawberry-async-view", _view("/graphql/async/"), "charge", "pay", True),
        Stack("strawberry-async", _view("/graphql/async/"), "chargeAsync", "payAsync", True),
    ]
    try:  # Graphene needs graphql-core < 3.3 (see tests/testapp/urls.py)
        import tests.testapp.graphene_api  # noqa: F401
    except ImportError:
        skip = pytest.mark.skip(reason="Graphene does not import beside this graphql-core")
        return [*stacks, pytest.param(None, id="graphene", marks=skip)]
    return [
        *stacks,
        Stack("graphene-sync", _view("/graphene/"), "charge", "pay", True),
        Stack("graphene-async", _graphene_async, "chargeAsync", "payAsync", False),
    ]


@pytest.fixture(params=_stacks(), ids=lambda stack: getattr(stack, "name", "graphene"))
def stack(request: pytest.FixtureRequest) -> Stack:
    found: Stack = request.param
    return found


BATCH_URLS = {
    "strawberry-sync": "/graphql/batch/",
    "strawberry-async-view": "/graphql/async/batch/",
    "strawberry-async": "/graphql/async/batch/",
    "graphene-sync": "/graphene/batch/",
}


def _batch(stack: Stack, bodies: list[Body], header: str | None) -> list[Any]:
    if not stack.batches:
        pytest.skip(f"{stack.name} has no batching transport")
    answers: list[Any] = _view(BATCH_URLS[stack.name])(bodies, header)
    assert isinstance(answers, list), answers
    return answers


def codes(answer: Any) -> list[str]:
    return [error["extensions"]["code"] for error in answer.get("errors") or []]


TYPES = {
    "reference": "String!",
    "key": "String",
    "amount": "Int",
    "a": "String",
    "b": "String",
    "id": "Int!",
}


def document(selection: str) -> str:
    """A mutation of ``selection`` declaring the variables it uses (an unused one is invalid)."""
    used = [name for name in TYPES if re.search(rf"\${name}\b", selection)]
    declared = ", ".join(f"${name}: {TYPES[name]}" for name in used)
    return f"mutation({declared}) {{ {selection} }}" if declared else f"mutation {{ {selection} }}"


def root(stack: Stack, *, alias: str = "", key: str = "$key", amount: str = "$amount") -> str:
    """A document with one protected root mutation."""
    name = f"{alias}: {stack.root}" if alias else stack.root
    return document(
        f"{name}(reference: $reference, idempotencyKey: {key}, amount: {amount}) {{ id reference }}"
    )


# --- a protected root field -------------------------------------------------------------------


def test_a_root_field_runs_once_and_its_retry_replays_the_answer(stack: Stack) -> None:
    reference, key = new_key(), new_key()
    variables = {"reference": reference, "key": key, "amount": 5}
    first = stack.send({"query": root(stack), "variables": variables}, None)
    retry = stack.send({"query": root(stack), "variables": variables}, None)
    assert "errors" not in first, first
    assert retry == first
    assert charges(reference) == 1


def test_a_root_field_keyed_by_the_header_runs_once(stack: Stack) -> None:
    reference, key = new_key(), new_key()
    body = {"query": root(stack, key="null"), "variables": {"reference": reference, "amount": 5}}
    first, retry = stack.send(body, key), stack.send(body, key)
    assert "errors" not in first, first
    assert retry == first
    assert charges(reference) == 1


def test_a_root_field_with_another_call_under_its_key_is_a_422(stack: Stack) -> None:
    reference, key = new_key(), new_key()
    query = root(stack)
    stack.send(
        {"query": query, "variables": {"reference": reference, "key": key, "amount": 5}}, None
    )
    other = stack.send(
        {"query": query, "variables": {"reference": reference, "key": key, "amount": 6}}, None
    )
    assert other["data"] is None or other["data"][stack.root] is None
    (error,) = other["errors"]
    assert error["extensions"] == {
        "code": "key-reused",
        "type": PROBLEM_BASE + "key-reused",
        "status": 422,
    }
    assert charges(reference) == 1


# --- aliased ----------------------------------------------------------------------------------


def test_an_aliased_field_is_the_same_call_and_replays_under_its_new_alias(stack: Stack) -> None:
    reference, key = new_key(), new_key()
    variables = {"reference": reference, "key": key, "amount": 5}
    first = stack.send({"query": root(stack, alias="paid"), "variables": variables}, None)
    retry = stack.send({"query": root(stack, alias="again"), "variables": variables}, None)
    plain = stack.send({"query": root(stack), "variables": variables}, None)
    assert "errors" not in first, first
    assert retry["data"]["again"] == first["data"]["paid"] == plain["data"][stack.root]
    assert charges(reference) == 1


# --- variables against literals ---------------------------------------------------------------


def test_a_literal_and_a_variable_of_the_same_value_are_the_same_call(stack: Stack) -> None:
    reference, key = new_key(), new_key()
    variables = {"reference": reference, "key": key, "amount": 5}
    first = stack.send({"query": root(stack), "variables": variables}, None)
    literal = stack.send({"query": root(stack, amount="5"), "variables": variables}, None)
    assert "errors" not in literal, literal
    assert literal == first
    assert charges(reference) == 1


def test_a_literal_of_another_value_than_the_variable_was_is_a_422(stack: Stack) -> None:
    reference, key = new_key(), new_key()
    variables = {"reference": reference, "key": key, "amount": 5}
    stack.send({"query": root(stack), "variables": variables}, None)
    literal = stack.send({"query": root(stack, amount="6"), "variables": variables}, None)
    assert codes(literal) == ["key-reused"]
    assert charges(reference) == 1


def test_a_parents_argument_as_a_literal_or_a_variable_is_the_same_call(stack: Stack) -> None:
    reference, key = new_key(), new_key()
    template = (
        "account(id: {id}) {{ {field}(reference: $reference, idempotencyKey: $key, amount: 5) "
        "{{ id reference }} }}"
    )
    by_variable = document(template.replace("{id}", "$id").format(field=stack.nested))
    by_literal = document(template.replace("{id}", "7").format(field=stack.nested))
    variables = {"reference": reference, "key": key, "id": 7}
    first = stack.send({"query": by_variable, "variables": variables}, None)
    del variables["id"]
    retry = stack.send({"query": by_literal, "variables": variables}, None)
    assert "errors" not in retry, retry
    assert retry == first
    assert charges(f"{reference}:7") == 1


# --- nested under a parent with arguments -----------------------------------------------------


def nested(stack: Stack, *accounts: tuple[str, int, str]) -> str:
    """``alias: account(id: N) { pay(..., idempotencyKey: KEY) }`` per (alias, id, key)."""
    fields = " ".join(
        f"{alias}: account(id: {account}) {{ {stack.nested}(reference: $reference, "
        f"idempotencyKey: {key}, amount: 5) {{ id reference }} }}"
        for alias, account, key in accounts
    )
    return document(fields)


def test_a_nested_field_runs_once_and_its_retry_replays_the_answer(stack: Stack) -> None:
    reference, key = new_key(), new_key()
    body = {"query": nested(stack, ("x", 7, "$a")), "variables": {"reference": reference, "a": key}}
    first, retry = stack.send(body, None), stack.send(body, None)
    assert "errors" not in first, first
    assert retry == first
    assert first["data"]["x"][stack.nested]["reference"] == f"{reference}:7"
    assert charges(f"{reference}:7") == 1


def test_a_key_used_under_one_parent_is_a_422_under_another(stack: Stack) -> None:
    """Issue 44, item 1: the key of ``account(id: 7) { pay }`` replayed account 7's payment to
    ``account(id: 8) { pay }``, and account 8 was never paid."""
    reference, key = new_key(), new_key()
    variables = {"reference": reference, "a": key}
    stack.send({"query": nested(stack, ("x", 7, "$a")), "variables": variables}, None)
    other = stack.send({"query": nested(stack, ("x", 8, "$a")), "variables": variables}, None)
    assert codes(other) == ["key-reused"]
    assert (charges(f"{reference}:7"), charges(f"{reference}:8")) == (1, 0)


def test_nested_fields_under_two_parents_sharing_the_header_key_are_refused(stack: Stack) -> None:
    """Issue 44, item 1: ``a: account(id: 1) { pay } b: account(id: 2) { pay }`` under one
    header key paid account 1 only and answered ``b`` with account 1's payment."""
    reference = new_key()
    query = nested(stack, ("a", 1, "null"), ("b", 2, "null"))
    answer = stack.send({"query": query, "variables": {"reference": reference}}, new_key())
    assert answer.get("data") is None
    (error,) = answer["errors"]
    assert error["extensions"] == {"code": "key-shared", "type": DOCS + "key-shared", "status": 400}
    assert (charges(f"{reference}:1"), charges(f"{reference}:2")) == (0, 0)


def test_a_nested_field_under_a_list_cannot_take_the_header_key(stack: Stack) -> None:
    """One field node under a list runs once per item: one header key can't key them all."""
    reference = new_key()
    query = (
        "mutation($reference: String!) { accounts(ids: [1]) "
        f"{{ {stack.nested}(reference: $reference) {{ id }} }} }}"
    )
    answer = stack.send({"query": query, "variables": {"reference": reference}}, new_key())
    assert codes(answer) == ["key-shared"]
    assert charges(f"{reference}:1") == 0


def test_nested_fields_under_two_parents_with_their_own_keys_each_run_once(stack: Stack) -> None:
    reference, a, b = new_key(), new_key(), new_key()
    query = nested(stack, ("one", 1, "$a"), ("two", 2, "$b"))
    body = {"query": query, "variables": {"reference": reference, "a": a, "b": b}}
    first, retry = stack.send(body, None), stack.send(body, None)
    assert "errors" not in first, first
    assert retry == first
    assert first["data"]["two"][stack.nested]["reference"] == f"{reference}:2"
    assert (charges(f"{reference}:1"), charges(f"{reference}:2")) == (1, 1)


def _depths(stack: Stack) -> dict[str, int]:
    if stack.name.startswith("graphene"):
        from tests.testapp import graphene_api

        return graphene_api.depths
    from tests.testapp import strawberry_api

    return strawberry_api.depths


def test_nested_fields_under_two_parents_commit_apart(stack: Stack) -> None:
    """Each nested protected field has a transaction of its own, one after the other (also
    when the async stacks await them together): one failing rolls back its write only."""
    reference, a, b = new_key(), new_key(), new_key()
    fields = " ".join(
        f"{alias}: account(id: {account}) {{ {stack.nested}(reference: $reference, "
        f"idempotencyKey: {key}, fail: {fail}) {{ id reference }} }}"
        for alias, account, key, fail in (("one", 1, "$a", "true"), ("two", 2, "$b", "false"))
    )
    body = {"query": document(fields), "variables": {"reference": reference, "a": a, "b": b}}
    answer = stack.send(body, None)
    (error,) = answer["errors"]
    assert error["path"] == ["one", stack.nested]
    assert answer["data"]["two"][stack.nested]["reference"] == f"{reference}:2"
    assert (charges(f"{reference}:1"), charges(f"{reference}:2")) == (0, 1)
    assert not IdempotencyEntry.objects.filter(key=a).exists()
    assert IdempotencyEntry.objects.filter(key=b).exists()
    depths = _depths(stack)
    assert depths[f"{reference}:1"] == depths[f"{reference}:2"]


def test_a_nested_field_and_a_root_field_sharing_the_header_key_are_refused(stack: Stack) -> None:
    reference = new_key()
    query = (
        "mutation($reference: String!) { "
        f"{stack.root}(reference: $reference) {{ id }} "
        f"account(id: 1) {{ {stack.nested}(reference: $reference) {{ id }} }} }}"
    )
    answer = stack.send({"query": query, "variables": {"reference": reference}}, new_key())
    assert codes(answer) == ["key-shared"]
    assert (charges(reference), charges(f"{reference}:1")) == (0, 0)


# --- two protected fields in one document -----------------------------------------------------


def test_two_root_fields_sharing_the_header_key_are_refused_whole(stack: Stack) -> None:
    first, second = new_key(), new_key()
    query = (
        "mutation($first: String!, $second: String!) { "
        f"one: {stack.root}(reference: $first) {{ id }} "
        f"two: {stack.root}(reference: $second) {{ id }} }}"
    )
    answer = stack.send(
        {"query": query, "variables": {"first": first, "second": second}}, new_key()
    )
    assert answer.get("data") is None
    assert codes(answer) == ["key-shared"]
    assert (charges(first), charges(second)) == (0, 0)


def test_two_root_fields_with_their_own_keys_each_run_once(stack: Stack) -> None:
    first, second = new_key(), new_key()
    query = (
        "mutation($first: String!, $second: String!, $a: String, $b: String) { "
        f"one: {stack.root}(reference: $first, idempotencyKey: $a) {{ id reference }} "
        f"two: {stack.root}(reference: $second, idempotencyKey: $b) {{ id reference }} }}"
    )
    variables = {"first": first, "second": second, "a": new_key(), "b": new_key()}
    answer = stack.send({"query": query, "variables": variables}, None)
    retry = stack.send({"query": query, "variables": variables}, None)
    assert "errors" not in answer, answer
    assert retry == answer
    assert (charges(first), charges(second)) == (1, 1)


def test_two_root_fields_given_one_key_in_their_arguments_are_refused_whole(stack: Stack) -> None:
    """One key written into two protected fields' arguments protected the first only: the
    second, the same call, was answered the first's charge (another call: a 422)."""
    reference, key = new_key(), new_key()
    query = (
        "mutation($reference: String!, $key: String) { "
        f"one: {stack.root}(reference: $reference, idempotencyKey: $key) {{ id }} "
        f"two: {stack.root}(reference: $reference, idempotencyKey: $key) {{ id }} }}"
    )
    answer = stack.send({"query": query, "variables": {"reference": reference, "key": key}}, None)
    assert answer.get("data") is None
    assert codes(answer) == ["key-shared"]
    assert charges(reference) == 0


def test_a_nested_field_under_a_list_cannot_take_one_argument_key(stack: Stack) -> None:
    """One key in the argument of a field under a list keys every item: refused as the header's
    would be (the first account was paid, the second refused as another call)."""
    reference = new_key()
    query = (
        "mutation($reference: String!, $key: String) { accounts(ids: [1, 2]) "
        f"{{ {stack.nested}(reference: $reference, idempotencyKey: $key) {{ id }} }} }}"
    )
    answer = stack.send(
        {"query": query, "variables": {"reference": reference, "key": new_key()}}, None
    )
    assert codes(answer) == ["key-shared"]
    assert (charges(f"{reference}:1"), charges(f"{reference}:2")) == (0, 0)


# --- a batch ----------------------------------------------------------------------------------


def _charge_body(stack: Stack, reference: str, key: str | None = None) -> Body:
    variables = {"reference": reference, "key": key, "amount": 5}
    return {"query": root(stack, key="$key"), "variables": variables}


def test_a_batch_sharing_the_header_key_between_operations_is_refused_whole(
    stack: Stack,
) -> None:
    """Issue 44, item 5: two protected mutations of one batch under one header key ran the
    first only, and both were answered its result."""
    first, second = new_key(), new_key()
    bodies = [_charge_body(stack, first), _charge_body(stack, second)]
    answers = _batch(stack, bodies, new_key())
    assert [codes(answer) for answer in answers] == [["key-shared"], ["key-shared"]]
    assert (charges(first), charges(second)) == (0, 0)


# Every encoding a stack batches under, beside plain ``application/json``: Strawberry takes any
# content type holding "application/json", and a multipart request (uploads enabled) whose
# ``operations`` field is a list; graphene-django takes exactly ``application/json``.
ENCODINGS = {
    "json-with-a-charset": ("application/json; charset=utf-8", ("strawberry", "graphene")),
    "json-suffixed": ("application/jsonx", ("strawberry",)),
    "multipart": ("multipart/form-data", ("strawberry",)),
}


def _batch_encoded(stack: Stack, encoding: str, bodies: list[Body], header: str) -> list[Any]:
    content_type, stacks = ENCODINGS[encoding]
    if not stack.batches or not stack.name.startswith(stacks):
        pytest.skip(f"{stack.name} does not batch {content_type}")
    headers = {"Idempotency-Key": header}
    if content_type == "multipart/form-data":  # the GraphQL multipart request spec
        url = f"{BATCH_URLS[stack.name]}uploads/"
        form = {"operations": json.dumps(bodies), "map": "{}"}
        response = Client().post(url, form, headers=headers)
    else:
        url = BATCH_URLS[stack.name]
        payload = json.dumps(bodies)
        response = Client().post(url, payload, content_type=content_type, headers=headers)
    answers = json.loads(response.content)
    assert isinstance(answers, list), response.content
    return answers


@pytest.mark.parametrize("encoding", list(ENCODINGS))
def test_a_batch_sharing_the_header_key_is_refused_whole_however_it_is_encoded(
    stack: Stack, encoding: str
) -> None:
    """A batch sent as ``application/jsonx`` or multipart skipped the refusal: its operations
    ran under one key (one charge, both answered its id, or the second a 422)."""
    first, second = new_key(), new_key()
    bodies = [_charge_body(stack, first), _charge_body(stack, second)]
    answers = _batch_encoded(stack, encoding, bodies, new_key())
    assert [codes(answer) for answer in answers] == [["key-shared"], ["key-shared"]]
    assert (charges(first), charges(second)) == (0, 0)


def test_a_batch_whose_operations_have_their_own_keys_runs_each_once(stack: Stack) -> None:
    first, second = new_key(), new_key()
    bodies = [_charge_body(stack, first, new_key()), _charge_body(stack, second, new_key())]
    answers = _batch(stack, bodies, None)
    retry = _batch(stack, bodies, None)
    assert [codes(answer) for answer in answers] == [[], []]
    assert retry == answers
    assert answers[0]["data"][stack.root]["reference"] == first
    assert answers[1]["data"][stack.root]["reference"] == second
    assert (charges(first), charges(second)) == (1, 1)


def test_a_batch_with_one_header_keyed_operation_runs_it_once(stack: Stack) -> None:
    reference, key = new_key(), new_key()
    bodies = [_charge_body(stack, reference), {"query": "query { ping }"}]
    answers = _batch(stack, bodies, key)
    retry = _batch(stack, bodies, key)
    assert [codes(answer) for answer in answers] == [[], []]
    assert retry == answers
    assert charges(reference) == 1
