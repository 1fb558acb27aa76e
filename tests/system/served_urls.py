"""The sample's URLs plus ``/chaos/…/charges/``: its own create view, pausing mid-transaction.

The pause comes after the business write, inside the view's transaction, only
when the request asks for it: ``X-Chaos-Gate: <id>`` waits at that gate (an
advisory lock the test holds: ``tests.system.harness.Gate``) until the test
opens it, and ``X-Chaos-Delay`` keeps working that long. The connection's
application_name then names the worker and the key, so a test that sees the
request wait at its gate can SIGKILL that worker or terminate that backend
while the charge is written but not committed.
"""

from __future__ import annotations

import inspect
import os
import time
from collections.abc import Callable
from typing import cast

import graphene
import strawberry
from asgiref.sync import sync_to_async
from django.db import connection
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, URLResolver, path
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from graphene_django.views import GraphQLView as GrapheneView
from mcp_server import MCPToolset
from mcp_server.djangomcp import DjangoMCP
from mcp_server.views import MCPServerStreamableHttpView
from ninja import NinjaAPI, Status
from rest_framework.authentication import TokenAuthentication
from strawberry.django.views import AsyncGraphQLView, GraphQLView

from idempotency_django import graphene as idempotent_graphene
from idempotency_django import idempotent
from idempotency_django import mcp as idempotent_mcp
from idempotency_django.ninja import idempotent as ninja_idempotent
from idempotency_django.strawberry import IdempotentExecutionContext, IdempotentExtension
from sample_project.payments import views
from sample_project.payments.models import Charge
from sample_project.payments.ninja_api import ChargeIn, ChargeOut
from sample_project.urls import urlpatterns as sample_urlpatterns
from tests.system.harness import GATE_CLASS

create_charge: Callable[[HttpRequest], HttpResponse] = inspect.unwrap(views.create_charge)


def pause_after_write(request: HttpRequest) -> HttpResponse:
    response = create_charge(request)
    if response.status_code == 201:
        pause(request)
    return response


def pause(request: HttpRequest) -> None:
    """What the request asked for, after its write: its gate, then its work."""
    gate = request.headers.get("X-Chaos-Gate")
    delay = float(request.headers.get("X-Chaos-Delay") or 0)
    if gate or delay > 0:
        announce(request.idempotency.key)  # type: ignore[attr-defined]
    if gate:
        wait_at_gate(int(gate))
    if delay > 0:
        keep_working(delay)


def wait_at_gate(gate: int) -> None:
    """Until the test opens the gate; held (shared) to the commit, so a test can close it."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock_shared(%s::int4, %s::int4)", [GATE_CLASS, gate]
        )


def keep_working(seconds: float) -> None:
    """More business work in the same transaction: fails as soon as its backend is gone."""
    until = time.monotonic() + seconds
    while (remaining := until - time.monotonic()) > 0:
        time.sleep(min(0.1, remaining))
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")


def announce(key: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT set_config('application_name', %s, false)", [f"idem_sys:{os.getpid()}:{key}"]
        )


# The same pause on Django Ninja operations (anonymous: the scenarios send no credentials).
chaos_ninja = NinjaAPI(urls_namespace="chaos-ninja")


def _write_then_pause(request: HttpRequest, payload: ChargeIn) -> Charge:
    charge = Charge.objects.create(**payload.dict())
    pause(request)
    return charge


@chaos_ninja.post("/charges", response={201: ChargeOut})
@ninja_idempotent
def ninja_charge(request: HttpRequest, payload: ChargeIn) -> Status[Charge]:
    return Status(201, _write_then_pause(request, payload))


@chaos_ninja.post("/async/charges", response={201: ChargeOut})
@ninja_idempotent
async def ninja_charge_async(request: HttpRequest, payload: ChargeIn) -> Status[Charge]:
    return Status(201, await sync_to_async(_write_then_pause)(request, payload))


# The same pause in a Strawberry mutation field, sync and ``async def``.
@strawberry.type
class PaidCharge:
    id: int
    amount: int
    description: str


def _paid(request: HttpRequest, amount: int, description: str) -> PaidCharge:
    charge = Charge.objects.create(amount=amount, description=description)
    pause(request)
    return PaidCharge(id=charge.pk, amount=charge.amount, description=charge.description)


@strawberry.type
class ChaosQuery:
    @strawberry.field
    def ping(self) -> str:
        return "pong"


@strawberry.type
class ChaosMutation:
    @strawberry.mutation(extensions=[IdempotentExtension()])
    def charge(self, info: strawberry.Info, amount: int, description: str) -> PaidCharge:
        return _paid(info.context.request, amount, description)

    @strawberry.mutation(extensions=[IdempotentExtension()])
    async def charge_async(
        self, info: strawberry.Info, amount: int, description: str
    ) -> PaidCharge:
        return await sync_to_async(_paid)(info.context.request, amount, description)


chaos_schema = strawberry.Schema(
    query=ChaosQuery, mutation=ChaosMutation, execution_context_class=IdempotentExecutionContext
)


# And in a Graphene mutation.
class GraphenePaid(graphene.ObjectType):  # type: ignore[misc]
    id = graphene.Int()
    amount = graphene.Int()
    description = graphene.String()


@idempotent_graphene.idempotent
class GrapheneCharge(graphene.Mutation):  # type: ignore[misc]
    class Arguments:
        amount = graphene.Int(required=True)
        description = graphene.String(required=True)

    Output = GraphenePaid

    def mutate(
        root: object, info: graphene.ResolveInfo, amount: int, description: str
    ) -> PaidCharge:
        return _paid(info.context, amount, description)


class GrapheneQuery(graphene.ObjectType):  # type: ignore[misc]
    ping = graphene.String(default_value="pong")


class GrapheneMutation(graphene.ObjectType):  # type: ignore[misc]
    charge = GrapheneCharge.Field()


graphene_schema = graphene.Schema(query=GrapheneQuery, mutation=GrapheneMutation)
graphene_view = GrapheneView.as_view(
    schema=graphene_schema, execution_context_class=idempotent_graphene.IdempotentExecutionContext
)


# And in an MCP tool (django-mcp-server), served on a server of its own: its endpoint speaks
# MCP's JSON-RPC over HTTP; a DRF token names the caller (its user is the tenant).
chaos_mcp = DjangoMCP(name="chaos")


class ChaosTools(MCPToolset):  # type: ignore[misc]  # django-mcp-server is untyped
    mcp_server = chaos_mcp

    @idempotent_mcp.idempotent
    def charge(self, amount: int, description: str, idempotency_key: str) -> dict[str, object]:
        """Charge ``amount`` cents, recorded under ``description``."""
        charge = Charge.objects.create(amount=amount, description=description)
        gate = self.request.headers.get("X-Chaos-Gate")
        if gate:  # after its write, inside the call's transaction
            announce(idempotency_key)
            wait_at_gate(int(gate))
        user = self.request.user
        caller = user.get_username() if user.is_authenticated else ""
        return {"id": charge.pk, "description": charge.description, "caller": caller}


# The mcp_server app (whose ready() registers every toolset) is not installed in the sample.
chaos_mcp.register_mcptoolset(ChaosTools())
mcp_view = MCPServerStreamableHttpView.as_view(
    mcp_server=chaos_mcp, authentication_classes=[TokenAuthentication], permission_classes=[]
)

urlpatterns: list[URLPattern | URLResolver] = [
    *cast(list[URLPattern | URLResolver], sample_urlpatterns),
    path("chaos/charges/", csrf_exempt(require_POST(idempotent(pause_after_write)))),
    # A lease far shorter than the pause: the request outlives it.
    path(
        "chaos/short-lease/charges/",
        csrf_exempt(require_POST(idempotent(lease=2)(pause_after_write))),
    ),
    path("chaos/ninja/", chaos_ninja.urls),
    path("chaos/graphql/", csrf_exempt(GraphQLView.as_view(schema=chaos_schema))),
    path("chaos/graphql/async/", csrf_exempt(AsyncGraphQLView.as_view(schema=chaos_schema))),
    path("chaos/graphene/", csrf_exempt(graphene_view)),
    path("chaos/mcp", mcp_view),
]
