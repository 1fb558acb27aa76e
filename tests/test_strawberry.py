"""``idempotency_django.strawberry``: protected Strawberry mutation fields, sync and async.

Runs on SQLite and, in the PostgreSQL pass, on PostgreSQL (the races too). The
schema is ``tests/testapp/strawberry_api.py``, served by Strawberry's Django views:
``/graphql/`` (sync) and ``/graphql/async/`` (async; ``chargeAsync`` is an ``async
def`` resolver, ``charge`` a sync one run in the claim's worker thread).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from decimal import Decimal
from enum import Enum
from types import SimpleNamespace
from typing import Annotated, Any

import pytest
import strawberry
from django.contrib.auth import get_user_model
from django.test import Client, RequestFactory

from idempotency_django._adapters import graphql_fields
from idempotency_django._adapters.graphql_fields import DOCS
from idempotency_django.exceptions import PROBLEM_BASE
from idempotency_django.models import IdempotencyEntry
from idempotency_django.strawberry import IdempotentExtension
from idempotency_django.strawberry import protection as strawberry_protection
from tests.helpers import charges, new_key, race
from tests.testapp import strawberry_api

pytestmark = [pytest.mark.faces, pytest.mark.django_db(transaction=True)]

# (endpoint, mutation field): a sync resolver under sync and async execution, an async one.
STACKS = pytest.mark.parametrize(
    ("url", "field"),
    [("/graphql/", "charge"), ("/graphql/async/", "charge"), ("/graphql/async/", "chargeAsync")],
)
SELECTION = "id reference amount caller committed errors { field message }"


def mutation(field: str, arguments: str = "", selection: str = SELECTION) -> str:
    return (
        "mutation($reference: String!, $key: String) { "
        f"{field}(reference: $reference, idempotencyKey: $key{arguments}) {{ {selection} }} }}"
    )


def send(
    url: str,
    query: str,
    variables: dict[str, Any] | None = None,
    *,
    header: str | None = None,
    client: Client | None = None,
) -> Any:
    headers = {} if header is None else {"Idempotency-Key": header}
    body = json.dumps({"query": query, "variables": variables or {}})
    response = (client or Client()).post(
        url, body, content_type="application/json", headers=headers
    )
    assert response.status_code == 200, response.content
    return response


def errors(response: Any) -> list[dict[str, Any]]:
    return list(json.loads(response.content).get("errors") or [])


def charge(
    url: str, field: str, reference: str, key: str | None, arguments: str = "", **kw: Any
) -> Any:
    return send(url, mutation(field, arguments), {"reference": reference, "key": key}, **kw)


@STACKS
def test_a_retry_replays_the_field_byte_for_byte(url: str, field: str) -> None:
    reference, key = new_key(), new_key()
    first = charge(url, field, reference, key)
    retry = charge(url, field, reference, key)
    assert errors(first) == []
    assert retry.content == first.content
    assert charges(reference) == 1
    assert strawberry_api.calls[reference] == 1
    entry = IdempotencyEntry.objects.get(key=key)
    assert entry.status == IdempotencyEntry.Status.COMPLETED


@STACKS
def test_the_replay_is_the_stored_selection_not_a_new_resolution(url: str, field: str) -> None:
    """``committed`` is a sub-field read when the field completes: replayed as it was."""
    reference, key = new_key(), new_key()
    first = charge(url, field, reference, key)
    charge(url, field, reference, new_key())  # a second charge with this reference
    retry = charge(url, field, reference, key)
    assert json.loads(first.content)["data"][field]["committed"] == 1
    assert retry.content == first.content
    assert charges(reference) == 2


@STACKS
def test_the_header_keys_a_field_when_the_document_gives_none(url: str, field: str) -> None:
    reference, key = new_key(), new_key()
    first = charge(url, field, reference, None, header=key)
    retry = charge(url, field, reference, None, header=key)
    assert retry.content == first.content
    assert charges(reference) == 1
    assert IdempotencyEntry.objects.filter(key=key).exists()


def test_the_argument_wins_over_the_header() -> None:
    reference, argument, header = new_key(), new_key(), new_key()
    charge("/graphql/", "charge", reference, argument, header=header)
    assert IdempotencyEntry.objects.filter(key=argument).exists()
    assert not IdempotencyEntry.objects.filter(key=header).exists()
    # The same request keyed by the header alone is another key: it runs again.
    charge("/graphql/", "charge", reference, None, header=header)
    assert charges(reference) == 2


@STACKS
def test_another_request_with_the_key_is_a_422_error(url: str, field: str) -> None:
    reference, key = new_key(), new_key()
    charge(url, field, reference, key)
    other = charge(url, field, reference, key, ", amount: 7")
    (error,) = errors(other)
    assert error["extensions"] == {
        "code": "key-reused",
        "type": PROBLEM_BASE + "key-reused",
        "status": 422,
    }
    assert error["path"] == [field]
    assert charges(reference) == 1


@STACKS
def test_another_selection_with_the_key_is_a_422_error(url: str, field: str) -> None:
    """The stored answer is the selection the first request asked for: it can't answer another."""
    reference, key = new_key(), new_key()
    charge(url, field, reference, key)
    query = mutation(field, selection="id")
    other = send(url, query, {"reference": reference, "key": key})
    assert errors(other)[0]["extensions"]["code"] == "key-reused"


def test_an_alias_is_not_part_of_the_request() -> None:
    reference, key = new_key(), new_key()
    first = charge("/graphql/", "charge", reference, key)
    aliased = mutation("paid: charge")
    retry = send("/graphql/", aliased, {"reference": reference, "key": key})
    data = json.loads(retry.content)["data"]
    assert data["paid"] == json.loads(first.content)["data"]["charge"]
    assert charges(reference) == 1


@STACKS
def test_a_duplicate_while_the_first_is_inside_its_resolver_is_a_409_error(
    url: str, field: str
) -> None:
    reference, key = new_key(), new_key()
    entered, release = strawberry_api.held[reference] = (threading.Event(), threading.Event())
    first: list[Any] = []
    worker = threading.Thread(
        target=lambda: first.append(charge(url, field, reference, key, ", hold: true"))
    )
    worker.start()
    try:
        assert entered.wait(30), "the first request never reached its resolver"
        duplicate = charge(url, field, reference, key, ", hold: true")
    finally:
        release.set()
        worker.join(60)
    (error,) = errors(duplicate)
    assert error["extensions"]["code"] == "in-progress"
    assert error["extensions"]["status"] == 409
    assert error["extensions"]["retryAfter"] >= 1
    assert error["extensions"]["type"] == PROBLEM_BASE + "in-progress"
    assert errors(first[0]) == []
    assert charges(reference) == 1
    assert strawberry_api.calls[reference] == 1


@STACKS
def test_two_callers_with_one_key_never_share_an_answer(url: str, field: str) -> None:
    reference, key = new_key(), new_key()
    alice, bob = Client(), Client()
    users = get_user_model().objects
    alice.force_login(users.create_user("alice"))
    bob.force_login(users.create_user("bob"))
    first = charge(url, field, reference, key, client=alice)
    second = charge(url, field, reference, key, client=bob)
    assert json.loads(first.content)["data"][field]["caller"] == "alice"
    assert json.loads(second.content)["data"][field]["caller"] == "bob"
    assert charges(reference) == 2
    assert IdempotencyEntry.objects.filter(key=key).count() == 2


@STACKS
def test_a_raising_resolver_stores_nothing_and_its_write_rolls_back(url: str, field: str) -> None:
    reference, key = new_key(), new_key()
    failed = charge(url, field, reference, key, ", fail: true")
    assert "failed after its write" in errors(failed)[0]["message"]
    assert charges(reference) == 0
    assert not IdempotencyEntry.objects.filter(key=key).exists()
    retried = charge(url, field, reference, key)  # the key is free: another request may run
    assert errors(retried) == []
    assert charges(reference) == 1


@STACKS
def test_a_failing_sub_field_stores_nothing_either(url: str, field: str) -> None:
    reference, key = new_key(), new_key()
    failed = charge(url, field, reference, key, ", explode: true")
    (error,) = errors(failed)
    assert error["path"] == [field, "committed"]
    assert charges(reference) == 0
    assert not IdempotencyEntry.objects.filter(key=key).exists()


@STACKS
def test_user_errors_in_the_payload_are_stored_and_replayed(url: str, field: str) -> None:
    reference, key = new_key(), new_key()
    first = charge(url, field, reference, key, ", amount: -1")
    retry = charge(url, field, reference, key, ", amount: -1")
    payload = json.loads(first.content)["data"][field]
    assert payload["errors"] == [{"field": "amount", "message": "must not be negative"}]
    assert retry.content == first.content
    assert strawberry_api.calls[reference] == 1


@STACKS
def test_a_missing_key_is_a_400_error(url: str, field: str) -> None:
    reference = new_key()
    (error,) = errors(charge(url, field, reference, None))
    assert error["extensions"]["code"] == "key-missing"
    assert error["extensions"]["status"] == 400
    assert "idempotencyKey argument or the Idempotency-Key header" in error["message"]
    assert charges(reference) == 0


def test_a_malformed_key_is_a_400_error() -> None:
    reference = new_key()
    (error,) = errors(charge("/graphql/", "charge", reference, "x" * 300))
    assert error["extensions"]["code"] == "key-malformed"
    assert charges(reference) == 0


def test_an_optional_key_left_out_runs_unprotected() -> None:
    reference = new_key()
    query = "mutation($r: String!) { headerOnly(reference: $r) { id } }"
    send("/graphql/", query, {"r": reference})
    send("/graphql/", query, {"r": reference})
    assert charges(reference) == 2


def test_a_literal_key_and_fragments_in_the_selection() -> None:
    reference, key = new_key(), new_key()
    query = (
        f'mutation {{ charge(reference: "{reference}", idempotencyKey: "{key}") '
        "{ ...Paid ... on ChargePayload { amount } } } "
        "fragment Paid on ChargePayload { id reference ...Who } "
        "fragment Who on ChargePayload { caller }"
    )
    first = send("/graphql/", query)
    assert errors(first) == []
    assert send("/graphql/", query).content == first.content
    assert charges(reference) == 1
    changed = query.replace(
        "fragment Who on ChargePayload { caller }", "fragment Who on ChargePayload { amount }"
    )
    assert errors(send("/graphql/", changed))[0]["extensions"]["code"] == "key-reused"


def test_a_protected_scalar_field_is_replayed() -> None:
    reference, key = new_key(), new_key()
    query = f'mutation {{ chargeId(reference: "{reference}", idempotencyKey: "{key}") }}'
    first = send("/graphql/", query)
    assert send("/graphql/", query).content == first.content
    assert charges(reference) == 1


def test_a_non_json_variable_still_fingerprints() -> None:
    class Money:
        def __init__(self) -> None:
            self.amount = 5

    class Plan(Enum):
        MONTHLY = "m"

    assert graphql_fields._plain(Money()) == {"amount": 5}
    assert graphql_fields._plain(Decimal("1.50")) == "1.50"
    assert graphql_fields._plain(Plan.MONTHLY) == "MONTHLY"


def test_a_graphene_style_context_is_the_request_itself() -> None:
    request = RequestFactory().post("/graphql/")
    assert graphql_fields.request_of(request) is request
    assert graphql_fields.request_of({"request": request}) is request


# --- a document with several mutations -------------------------------------------------------


def test_two_protected_fields_with_their_own_keys_each_run_once() -> None:
    first, second, a, b = new_key(), new_key(), new_key(), new_key()
    query = (
        "mutation($first: String!, $second: String!, $a: String, $b: String) { "
        "one: charge(reference: $first, idempotencyKey: $a) { id amount } "
        "two: charge(reference: $second, idempotencyKey: $b) { id amount } }"
    )
    variables = {"first": first, "second": second, "a": a, "b": b}
    answer = send("/graphql/", query, variables)
    retry = send("/graphql/", query, variables)
    assert errors(answer) == []
    assert retry.content == answer.content
    assert (charges(first), charges(second)) == (1, 1)


def test_a_document_keying_two_protected_fields_by_one_header_is_refused_whole() -> None:
    first, second, other = new_key(), new_key(), new_key()
    query = (
        "mutation($first: String!, $second: String!, $other: String!) { "
        "unprotected(reference: $other) "
        "one: charge(reference: $first) { id } "
        "two: headerOnly(reference: $second) { id } }"
    )
    variables = {"first": first, "second": second, "other": other}
    answer = send("/graphql/", query, variables, header=new_key())
    body = json.loads(answer.content)
    assert body["data"] is None
    (error,) = body["errors"]
    assert error["extensions"] == {"code": "key-shared", "type": DOCS + "key-shared", "status": 400}
    assert (charges(first), charges(second), charges(other)) == (0, 0, 0)


def test_root_fields_in_fragments_count_too() -> None:
    first, second = new_key(), new_key()
    query = (
        "mutation($first: String!, $second: String!) { ...Both "
        "... on Mutation { one: charge(reference: $first) { id } } } "
        "fragment Both on Mutation { one: charge(reference: $first) { id } "
        "two: headerOnly(reference: $second) { id } }"
    )
    answer = send("/graphql/", query, {"first": first, "second": second}, header=new_key())
    assert errors(answer)[0]["extensions"]["code"] == "key-shared"
    assert (charges(first), charges(second)) == (0, 0)


def test_one_header_keyed_field_beside_argument_keyed_ones_runs() -> None:
    first, second, key = new_key(), new_key(), new_key()
    query = (
        "mutation($first: String!, $second: String!, $key: String) { "
        "one: charge(reference: $first, idempotencyKey: $key) { id } "
        "two: charge(reference: $second) { id } }"
    )
    answer = send(
        "/graphql/", query, {"first": first, "second": second, "key": key}, header=new_key()
    )
    assert errors(answer) == []
    assert (charges(first), charges(second)) == (1, 1)


# --- the schema and its configuration --------------------------------------------------------


def test_the_schema_documents_the_key_argument() -> None:
    sdl = strawberry_api.schema.as_str()
    assert "idempotencyKey: String = null" in sdl
    assert "Overrides the Idempotency-Key header" in sdl
    assert "headerOnly(reference: String!): ChargePayload!" in sdl


def test_a_schema_without_the_execution_context_refuses_to_run_the_field() -> None:
    reference = new_key()
    answer = charge("/graphql/misconfigured/", "charge", reference, new_key())
    assert "execution_context_class=IdempotentExecutionContext" in errors(answer)[0]["message"]
    assert charges(reference) == 0


def test_executed_without_a_django_request_the_field_says_so() -> None:
    result = strawberry_api.schema.execute_sync(
        mutation("charge"), {"reference": new_key(), "key": new_key()}
    )
    assert result.errors is not None
    assert "needs the Django request in info.context" in result.errors[0].message


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"methods": ["POST"]}, "unexpected keyword argument 'methods'"),
        ({"ttl": "soon"}, "ttl"),
        ({"argument": "idempotency-key"}, "GraphQL name"),
    ],
)
def test_a_wrong_option_is_a_type_error_when_applied(options: dict[str, Any], message: str) -> None:
    with pytest.raises(TypeError, match=message):
        IdempotentExtension(**options)


# --- races on PostgreSQL ---------------------------------------------------------------------


@pytest.mark.requires_postgres
@STACKS
def test_sixteen_racing_retries_execute_once(url: str, field: str) -> None:
    for _ in range(3):
        reference, key = new_key(), new_key()

        def one(_index: int, reference: str = reference, key: str = key) -> Any:
            return charge(url, field, reference, key)

        answers = race(16, one)
        assert not [a for a in answers if isinstance(a, BaseException)], answers
        ran = [a for a in answers if not errors(a)]
        busy = [a for a in answers if errors(a)]
        assert {e["extensions"]["code"] for a in busy for e in errors(a)} <= {"in-progress"}
        assert {a.content for a in ran} == {ran[0].content}  # one answer, replayed
        assert charges(reference) == 1
        assert strawberry_api.calls[reference] == 1


@pytest.mark.requires_postgres
@STACKS
def test_two_callers_racing_one_key_stay_apart(url: str, field: str) -> None:
    reference, key = new_key(), new_key()
    users = get_user_model().objects
    clients = []
    for name in ("alice", "bob"):
        client = Client()
        client.force_login(users.create_user(name))
        clients.append((name, client))
    callers = clients * 8
    answers = race(16, lambda i: charge(url, field, reference, key, client=callers[i][1]))
    for index, answer in enumerate(answers):
        if not errors(answer):
            assert json.loads(answer.content)["data"][field]["caller"] == callers[index][0]
    assert charges(reference) == 2


def test_importing_it_without_strawberry_says_what_to_install() -> None:
    code = (
        "import sys\n"
        "sys.modules['strawberry'] = None\n"
        "import django; from django.conf import settings\n"
        "settings.configure(INSTALLED_APPS=['idempotency_django'], DATABASES={})\n"
        "django.setup()\n"
        "try:\n"
        "    import idempotency_django.strawberry\n"
        "except ModuleNotFoundError as error:\n"
        "    print(error.name, error, sep='|')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    name, message = result.stdout.strip().split("|")
    assert name == "strawberry", result.stderr
    assert message.endswith("pip install 'idempotency-django[strawberry]'")


def test_only_the_types_on_the_way_to_a_protected_field_are_followed() -> None:
    """A field's place is recorded only where a protected field may lie below it: a query's
    fields (or a payload's sub-fields) cost nothing more."""
    schema = strawberry_api.schema._schema
    reaching = graphql_fields._reaching(schema, strawberry_protection)
    assert {"Mutation", "AccountOps"} <= reaching
    assert not reaching & {"Query", "ChargePayload", "UserError", "String"}


# --- what the shared-key check reads, and what it skips ---------------------------------------


def test_typename_beside_a_protected_field_is_answered_and_the_field_replays() -> None:
    reference, key = new_key(), new_key()
    query = "mutation($reference: String!) { __typename charge(reference: $reference) { id } }"
    first = send("/graphql/", query, {"reference": reference}, header=key)
    retry = send("/graphql/", query, {"reference": reference}, header=key)
    assert json.loads(first.content)["data"]["__typename"] == "Mutation"
    assert retry.content == first.content
    assert charges(reference) == 1


def test_a_query_sent_by_get_without_a_json_body_runs() -> None:
    response = Client().get("/graphql/", {"query": "{ ping }"}, headers={"Idempotency-Key": "k"})
    assert json.loads(response.content) == {"data": {"ping": "pong"}}


def test_a_request_no_view_serves_is_protected_as_a_single_document() -> None:
    """A request executed by hand (no Strawberry view routed to it, its body read as a stream):
    nothing reads it as a batch, and the field is protected as a single document's."""
    reference, key = new_key(), new_key()

    def execute() -> Any:  # a retry is another request: a request takes one key once
        request = RequestFactory().post(
            "/graphql/", b"{}", content_type="application/json", headers={"Idempotency-Key": key}
        )
        request.read()
        request.user = get_user_model()()  # an unsaved user: anonymous to the protection
        context = SimpleNamespace(request=request)
        query = "mutation($reference: String!) { charge(reference: $reference) { id } }"
        return strawberry_api.schema.execute_sync(
            query, {"reference": reference}, context_value=context
        )

    results = [execute(), execute()]
    assert [result.errors for result in results] == [None, None]
    assert results[1].data == results[0].data
    assert charges(reference) == 1


def test_a_batch_item_that_is_no_operation_is_left_to_its_own_error() -> None:
    """The shared-key check reads only the batch's operations: an item that does not parse,
    chooses no single operation, spreads an unknown fragment, is a subscription (none in this
    schema) or has no query string counts nothing; the header-keyed charge beside them runs once and replays."""
    reference, key = new_key(), new_key()
    bodies = [
        {"query": mutation("charge", selection="id"), "variables": {"reference": reference}},
        {"query": "mutation {"},
        {"query": 'mutation A { unprotected(reference: "a") } mutation B { ping }'},
        {"query": "mutation { ...Missing }"},
        {"query": "subscription { ping }"},
        {"query": 5},
    ]
    payload = json.dumps(bodies)
    headers = {"Idempotency-Key": key}
    answers = [
        json.loads(
            Client()
            .post("/graphql/batch/", payload, content_type="application/json", headers=headers)
            .content
        )
        for _ in range(2)
    ]
    assert answers[1][0] == answers[0][0]
    assert "errors" not in answers[0][0], answers[0][0]
    assert "Syntax Error" in answers[0][1]["errors"][0]["message"]
    assert "Unknown fragment 'Missing'" in answers[0][3]["errors"][0]["message"]
    assert "subscription" in answers[0][4]["errors"][0]["message"]
    assert answers[0][5]["data"] is None
    assert charges(reference) == 1


@strawberry.interface
class Node:
    id: int


@strawberry.type
class Wallet(Node):
    @strawberry.mutation(extensions=[IdempotentExtension()])
    def pay(self, reference: str) -> int:
        return 1


@strawberry.interface
class Reason:
    reason: str


@strawberry.type
class Empty(Reason):
    pass


@strawberry.type
class Ops:
    @strawberry.field
    def node(self, id: int) -> Node:
        return Wallet(id=id)

    @strawberry.field
    def found(self, id: int) -> Annotated[Wallet | Empty, strawberry.union("Found")]:
        return Wallet(id=id)


@strawberry.type
class Root:
    @strawberry.field
    def ops(self) -> Ops:
        return Ops()


def test_a_protected_field_below_an_interface_or_a_union_is_on_the_way() -> None:
    """``node(id) { ... on Wallet { pay } }`` and ``found(id) { ... on Wallet { pay } }``: the
    interface and the union are followed to the protected field; a member without one, and an
    interface only it implements, are not."""
    schema = strawberry.Schema(query=Root, mutation=Ops, types=[Wallet])
    reaching = graphql_fields._reaching(schema._schema, strawberry_protection)
    assert {"Wallet", "Node", "Found", "Ops", "Root"} <= reaching
    assert not reaching & {"Empty", "Reason"}
