"""``idempotency_django.mcp.idempotent``: django-mcp-server tools run once per (user, key).

The tools are ``tests/testapp/mcp_tools.py``; each call goes the way django-mcp-server
makes it (a toolset instance holding the MCP request, the method run in a thread), and
the registration through FastMCP shows what the agent reads. Runs on SQLite and, in
the PostgreSQL pass, on PostgreSQL (the races too).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import types
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser
from django.test import RequestFactory
from mcp.server.fastmcp.tools import ToolManager

from idempotency_django.mcp import ToolRefused, idempotent
from idempotency_django.models import IdempotencyEntry
from tests.helpers import charges, new_key, race
from tests.test_docs_examples import _code_blocks
from tests.testapp.mcp_tools import OrderTools, held

pytestmark = [pytest.mark.faces, pytest.mark.versions, pytest.mark.django_db(transaction=True)]


def tools(user: Any = None) -> OrderTools:
    request = RequestFactory().post("/mcp")
    request.user = user or AnonymousUser()
    return OrderTools(request=request)


def test_a_retried_call_replays_its_result() -> None:
    reference, key = new_key(), new_key()
    first = tools().create_order(reference, 5, key)
    again = tools().create_order(reference=reference, amount=5, idempotency_key=key)
    assert again == first
    assert charges(reference) == 1
    stored = IdempotencyEntry.objects.get()
    assert stored.key.endswith(key)
    assert stored.key != key  # namespaced per tool


def test_the_key_with_other_arguments_is_refused() -> None:
    reference, key = new_key(), new_key()
    tools().create_order(reference, 5, key)
    with pytest.raises(ToolRefused, match=r"^key-reused: "):
        tools().create_order(reference, 6, key)
    assert charges(reference) == 1


def test_a_call_while_the_first_runs_is_refused_in_progress() -> None:
    reference, key = new_key(), new_key()
    entered, release = held[reference] = (threading.Event(), threading.Event())
    first: list[Any] = []
    worker = threading.Thread(
        target=lambda: first.append(tools().create_order(reference, 5, key, hold=True))
    )
    worker.start()
    try:
        assert entered.wait(30), "the first call never reached its tool"
        with pytest.raises(ToolRefused, match=r"^in-progress: .* Retry with the same key in \d+ s"):
            tools().create_order(reference, 5, key, hold=True)
    finally:
        release.set()
        worker.join(60)
    assert first[0]["id"] > 0
    assert charges(reference) == 1


def test_two_users_with_one_key_never_share_a_result() -> None:
    reference, key = new_key(), new_key()
    users = get_user_model().objects
    alice = tools(users.create_user("alice")).create_order(reference, 5, key)
    bob = tools(users.create_user("bob")).create_order(reference, 5, key)
    assert (alice["caller"], bob["caller"]) == ("alice", "bob")
    assert charges(reference) == 2


def test_a_failing_tool_stores_nothing() -> None:
    reference, key = new_key(), new_key()
    with pytest.raises(ValueError, match="a failing tool"):
        tools().create_order(reference, -1, key)
    assert charges(reference) == 0
    assert not IdempotencyEntry.objects.exists()


def test_an_empty_key_is_refused() -> None:
    with pytest.raises(ToolRefused, match=r"^key-missing: "):
        tools().create_order(new_key(), 5, "")


def test_a_key_derived_from_the_arguments() -> None:
    reference = new_key()
    first = tools().refund(reference, 3)
    assert tools().refund(reference, 3) == first
    tools().refund(reference, 4)
    assert charges(reference) == 2


def test_the_agent_reads_how_to_use_the_key() -> None:
    manager = ToolManager()
    OrderTools()._add_tools_to(manager)
    create = manager.get_tool("create_order")
    assert create is not None
    assert "idempotency_key" in create.parameters["properties"]
    assert "call again with the SAME key" in (create.description or "")
    refund = manager.get_tool("refund")
    assert refund is not None
    assert "idempotency_key" not in refund.parameters["properties"]
    assert "same arguments does not repeat the action" in (refund.description or "")


def test_called_through_the_mcp_tool_manager() -> None:
    """As django-mcp-server calls it: an instance holding the request, in a thread."""
    from mcp_server.djangomcp import django_request_ctx

    manager = ToolManager()
    OrderTools()._add_tools_to(manager)
    request = RequestFactory().post("/mcp")
    request.user = AnonymousUser()
    reference, key = new_key(), new_key()
    arguments = {"reference": reference, "amount": 5, "idempotency_key": key}

    async def call() -> Any:
        django_request_ctx.set(request)
        return await manager.call_tool("create_order", arguments)

    first, again = asyncio.run(call()), asyncio.run(call())
    assert again == first
    assert charges(reference) == 1


@pytest.mark.parametrize(
    ("decorate", "message"),
    [
        (lambda: idempotent(key="order"), "callable"),  # type: ignore[call-overload]
        (lambda: idempotent(lambda self, amount: amount), "needs an 'idempotency_key'"),
        (lambda: idempotent(_async_tool), "sync tools"),
        (lambda: idempotent(ttl="soon"), "ttl"),  # type: ignore[call-overload]
    ],
)
def test_a_wrong_use_is_a_type_error_when_applied(decorate: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        decorate()


async def _async_tool(self: Any, idempotency_key: str) -> None:  # pragma: no cover
    pass


def test_outside_an_mcp_call_it_says_so() -> None:
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(ImproperlyConfigured, match="MCP call's Django request"):
        OrderTools().create_order(new_key(), 5, new_key())


def test_served_by_django_mcp_servers_drf_view_the_caller_is_its_authenticated_user() -> None:
    """Served, the toolset holds DRF's ``Request`` (the MCP endpoint is a DRF view), which
    wraps the HttpRequest; the tenant is the user DRF's authentication found
    (``tests/system/test_mcp_stack.py`` calls it through gunicorn)."""
    from rest_framework.request import Request

    http = RequestFactory().post("/mcp")
    http.user = AnonymousUser()
    served = Request(http)
    served.user = get_user_model().objects.create_user("carol")  # as DRF's authentication does
    key = new_key()
    answer = OrderTools(request=served).create_order(new_key(), 5, key)
    assert answer["caller"] == "carol"
    assert IdempotencyEntry.objects.get().tenant == str(served.user.pk)


def test_importing_it_without_django_mcp_server_says_what_to_install() -> None:
    code = (
        "import sys\n"
        "sys.modules['mcp_server'] = None\n"
        "import django; from django.conf import settings\n"
        "settings.configure(INSTALLED_APPS=['idempotency_django'], DATABASES={})\n"
        "django.setup()\n"
        "try:\n"
        "    import idempotency_django.mcp\n"
        "except ModuleNotFoundError as error:\n"
        "    print(error.name, error, sep='|')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    name, message = result.stdout.strip().split("|")
    assert name == "mcp_server", result.stderr
    assert message.endswith("pip install 'idempotency-django[mcp]'")


@pytest.mark.requires_postgres
def test_sixteen_racing_retries_execute_once() -> None:
    reference, key = new_key(), new_key()

    def one(_index: int) -> Any:
        try:
            return tools().create_order(reference, 5, key)
        except ToolRefused as refused:
            return refused.error.code

    answers = race(16, one)
    results = [a for a in answers if isinstance(a, dict)]
    assert {a for a in answers if not isinstance(a, dict)} <= {"in-progress"}, answers
    assert results
    assert all(r == results[0] for r in results)
    assert charges(reference) == 1


@pytest.mark.requires_postgres
def test_two_users_racing_one_key_stay_apart() -> None:
    reference, key = new_key(), new_key()
    users = get_user_model().objects
    people = [users.create_user("alice"), users.create_user("bob")] * 8

    def one(index: int) -> Any:
        try:
            return tools(people[index]).create_order(reference, 5, key)
        except ToolRefused as refused:
            return refused.error.code

    answers = race(16, one)
    for index, answer in enumerate(answers):
        if isinstance(answer, dict):
            assert answer["caller"] == people[index].username
    assert charges(reference) == 2


def test_the_docs_example_runs_as_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    from sample_project.payments import models

    (block,) = _code_blocks("mcp.rst")
    monkeypatch.setitem(sys.modules, "payments", types.ModuleType("payments"))
    monkeypatch.setitem(sys.modules, "payments.models", models)
    namespace: dict[str, Any] = {}
    exec(compile(block, "docs/mcp.rst", "exec"), namespace)
    request = RequestFactory().post("/mcp")
    request.user = get_user_model().objects.create_user("agent")
    toolset = namespace["PaymentTools"](request=request)
    key = new_key()
    first = toolset.charge(500, key)
    assert toolset.charge(500, key) == first
    assert models.Charge.objects.get().user == request.user
