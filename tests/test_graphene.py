"""``idempotency_django.graphene``: protected Graphene mutations, sync (graphene-django's
view) and ``async def`` (``Schema.execute_async``).

Runs on SQLite and, in the PostgreSQL pass, on PostgreSQL (the races too). The
schema is ``tests/testapp/graphene_api.py``; the behaviour is the Strawberry
adapter's (``tests/test_strawberry.py`` covers the shared part in depth).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser
from django.db import connections
from django.test import Client, RequestFactory

from idempotency_django.exceptions import PROBLEM_BASE
from idempotency_django.graphene import IdempotentExecutionContext, idempotent
from idempotency_django.models import IdempotencyEntry
from tests.helpers import charges, new_key, race
from tests.testapp import graphene_api

pytestmark = [pytest.mark.faces, pytest.mark.django_db(transaction=True)]
URL = "/graphene/"


SELECTION = "id reference caller committed errors { field message }"


def mutation(field: str = "charge", arguments: str = "", selection: str = SELECTION) -> str:
    return (
        "mutation($reference: String!, $key: String) { "
        f"{field}(reference: $reference, idempotencyKey: $key{arguments}) {{ {selection} }} }}"
    )


def send(
    reference: str,
    key: str | None,
    arguments: str = "",
    *,
    header: str | None = None,
    client: Client | None = None,
    url: str = URL,
) -> Any:
    headers = {} if header is None else {"Idempotency-Key": header}
    body = json.dumps(
        {"query": mutation("charge", arguments), "variables": {"reference": reference, "key": key}}
    )
    return (client or Client()).post(url, body, content_type="application/json", headers=headers)


def errors(response: Any) -> list[dict[str, Any]]:
    return list(json.loads(response.content).get("errors") or [])


def test_a_retry_replays_the_mutation_byte_for_byte() -> None:
    reference, key = new_key(), new_key()
    first = send(reference, key)
    send(reference, new_key())  # another charge: "committed" would now read 2
    retry = send(reference, key)
    assert errors(first) == []
    assert json.loads(first.content)["data"]["charge"]["committed"] == 1
    assert retry.content == first.content
    assert charges(reference) == 2


def test_the_header_keys_it_when_the_document_gives_none() -> None:
    reference, key = new_key(), new_key()
    first = send(reference, None, header=key)
    assert send(reference, None, header=key).content == first.content
    assert charges(reference) == 1
    assert IdempotencyEntry.objects.filter(key=key).exists()


def test_another_request_with_the_key_is_a_422_error() -> None:
    reference, key = new_key(), new_key()
    send(reference, key)
    (error,) = errors(send(reference, key, ", amount: 7"))
    assert error["extensions"] == {
        "code": "key-reused",
        "type": PROBLEM_BASE + "key-reused",
        "status": 422,
    }
    assert charges(reference) == 1


def test_a_duplicate_while_the_first_is_inside_its_resolver_is_a_409_error() -> None:
    reference, key = new_key(), new_key()
    entered, release = graphene_api.held[reference] = (threading.Event(), threading.Event())
    first: list[Any] = []
    worker = threading.Thread(target=lambda: first.append(send(reference, key, ", hold: true")))
    worker.start()
    try:
        assert entered.wait(30), "the first request never reached its resolver"
        duplicate = send(reference, key, ", hold: true")
    finally:
        release.set()
        worker.join(60)
    (error,) = errors(duplicate)
    assert error["extensions"]["code"] == "in-progress"
    assert error["extensions"]["retryAfter"] >= 1
    assert errors(first[0]) == []
    assert charges(reference) == 1


def test_two_callers_with_one_key_never_share_an_answer() -> None:
    reference, key = new_key(), new_key()
    alice, bob = Client(), Client()
    users = get_user_model().objects
    alice.force_login(users.create_user("alice"))
    bob.force_login(users.create_user("bob"))
    first = send(reference, key, client=alice)
    second = send(reference, key, client=bob)
    assert json.loads(first.content)["data"]["charge"]["caller"] == "alice"
    assert json.loads(second.content)["data"]["charge"]["caller"] == "bob"
    assert charges(reference) == 2


def test_a_raising_resolver_stores_nothing() -> None:
    reference, key = new_key(), new_key()
    assert "failed after its write" in errors(send(reference, key, ", fail: true"))[0]["message"]
    assert charges(reference) == 0
    assert not IdempotencyEntry.objects.filter(key=key).exists()
    assert errors(send(reference, key)) == []
    assert charges(reference) == 1


def test_user_errors_in_the_payload_are_stored_and_replayed() -> None:
    reference, key = new_key(), new_key()
    first = send(reference, key, ", amount: -1")
    assert json.loads(first.content)["data"]["charge"]["errors"][0]["field"] == "amount"
    assert send(reference, key, ", amount: -1").content == first.content
    assert graphene_api.calls[reference] == 1


def test_a_missing_key_is_a_400_error() -> None:
    (error,) = errors(send(new_key(), None))
    assert error["extensions"]["code"] == "key-missing"


def test_the_schema_documents_the_key_argument() -> None:
    sdl = str(graphene_api.schema)
    assert "idempotencyKey: String" in sdl
    assert "Overrides the Idempotency-Key header" in sdl


def test_a_view_without_the_execution_context_refuses_to_run_it() -> None:
    reference = new_key()
    answer = send(reference, new_key(), url=f"{URL}misconfigured/")
    assert "execution_context_class=IdempotentExecutionContext" in errors(answer)[0]["message"]
    assert charges(reference) == 0


def test_an_async_mutation_through_execute_async() -> None:
    reference, key = new_key(), new_key()

    def run() -> Any:  # a retry is another request: a request takes one key once
        request = RequestFactory().post("/graphene/")
        request.user = AnonymousUser()
        return asyncio.run(
            graphene_api.schema.execute_async(
                # No "committed": a sync resolver, which can't use the ORM on the event loop.
                mutation("chargeAsync", selection="id reference caller"),
                variables={"reference": reference, "key": key},
                context_value=request,
                execution_context_class=IdempotentExecutionContext,
            )
        )

    try:
        first, retry = run(), run()
    finally:  # the claim ran in asgiref's shared thread: close its connection there
        asyncio.run(sync_to_async(connections.close_all)())
    assert first.errors is None
    assert retry.data == first.data
    assert charges(reference) == 1


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"methods": ["POST"]}, "takes no methods"),
        ({"ttl": "soon"}, "ttl"),
        ({"argument": "idempotency-key"}, "GraphQL name"),
    ],
)
def test_a_wrong_option_is_a_type_error_when_applied(options: dict[str, Any], message: str) -> None:
    with pytest.raises(TypeError, match=message):
        idempotent(**options)


def test_it_decorates_mutation_classes_only() -> None:
    with pytest.raises(TypeError, match=r"graphene\.Mutation"):
        idempotent(dict)


def test_importing_it_without_graphene_says_what_to_install() -> None:
    code = (
        "import sys\n"
        "sys.modules['graphene'] = None\n"
        "import django; from django.conf import settings\n"
        "settings.configure(INSTALLED_APPS=['idempotency_django'], DATABASES={})\n"
        "django.setup()\n"
        "try:\n"
        "    import idempotency_django.graphene\n"
        "except ModuleNotFoundError as error:\n"
        "    print(error.name, error, sep='|')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    name, message = result.stdout.strip().split("|")
    assert name == "graphene", result.stderr
    assert message.endswith("pip install 'idempotency-django[graphene]'")


@pytest.mark.requires_postgres
def test_sixteen_racing_retries_execute_once() -> None:
    reference, key = new_key(), new_key()
    answers = race(16, lambda _i: send(reference, key))
    assert not [a for a in answers if isinstance(a, BaseException)], answers
    ran = [a for a in answers if not errors(a)]
    assert {e["extensions"]["code"] for a in answers for e in errors(a)} <= {"in-progress"}
    assert {a.content for a in ran} == {ran[0].content}
    assert charges(reference) == 1


@pytest.mark.requires_postgres
def test_two_callers_racing_one_key_stay_apart() -> None:
    reference, key = new_key(), new_key()
    users = get_user_model().objects
    clients = []
    for name in ("alice", "bob"):
        client = Client()
        client.force_login(users.create_user(name))
        clients.append((name, client))
    callers = clients * 8
    answers = race(16, lambda i: send(reference, key, client=callers[i][1]))
    for index, answer in enumerate(answers):
        if not errors(answer):
            assert json.loads(answer.content)["data"]["charge"]["caller"] == callers[index][0]
    assert charges(reference) == 2
