"""A Graphene schema whose mutations are protected (``tests/test_graphene.py``)."""

from __future__ import annotations

import json
import threading
from typing import Any

import graphene
from asgiref.sync import sync_to_async
from django.db import connection
from django.http import HttpRequest
from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from graphene_django.views import GraphQLView

from idempotency_django.graphene import IdempotentExecutionContext, idempotent
from tests.testapp.models import Charge

# reference -> (entered, release): a held resolver waits inside its transaction for the test.
held: dict[str, tuple[threading.Event, threading.Event]] = {}
calls: dict[str, int] = {}


class UserError(graphene.ObjectType):
    field = graphene.String()
    message = graphene.String()


def _charge(info: Any, reference: str, amount: int, fail: bool, hold: bool) -> dict[str, Any]:
    calls[reference] = calls.get(reference, 0) + 1
    request = info.context
    caller = request.user.get_username() if request.user.is_authenticated else ""
    if amount < 0:
        error = UserError(field="amount", message="must not be negative")
        return {"id": None, "reference": reference, "caller": caller, "errors": [error]}
    charge = Charge.objects.create(reference=reference, amount=amount)
    if hold:
        entered, release = held[reference]
        entered.set()
        assert release.wait(30), "the test never released the held resolver"
    if fail:
        raise RuntimeError("the resolver failed after its write")
    return {"id": charge.pk, "reference": reference, "caller": caller, "errors": []}


class Paid(graphene.ObjectType):
    id = graphene.Int()
    reference = graphene.String()
    caller = graphene.String()
    errors = graphene.List(UserError)
    committed = graphene.Int()

    def resolve_committed(parent: dict[str, Any], info: Any) -> int:
        return Charge.objects.filter(reference=parent["reference"]).count()


class ChargeArguments:
    reference = graphene.String(required=True)
    amount = graphene.Int(default_value=100)
    fail = graphene.Boolean(default_value=False)
    hold = graphene.Boolean(default_value=False)


@idempotent
class PayCharge(graphene.Mutation):
    Arguments = ChargeArguments
    Output = Paid

    def mutate(root: Any, info: Any, **kwargs: Any) -> dict[str, Any]:
        return _charge(info, **kwargs)


@idempotent(required=True)
class PayChargeAsync(graphene.Mutation):
    Arguments = ChargeArguments
    Output = Paid

    async def mutate(root: Any, info: Any, **kwargs: Any) -> dict[str, Any]:
        return await sync_to_async(_charge)(info, **kwargs)


class PayArguments:
    reference = graphene.String(required=True)
    amount = graphene.Int(default_value=100)
    fail = graphene.Boolean(default_value=False)


# reference -> how many atomic blocks were open where a payment ran (its claim's, and any
# around it): two payments of one document, each in a transaction of its own, see one depth.
depths: dict[str, int] = {}


def _pay(info: Any, reference: str, amount: int, fail: bool) -> dict[str, Any]:
    depths[reference] = len(connection.atomic_blocks)
    return _charge(info, reference, amount, fail, False)


@idempotent
class Pay(graphene.Mutation):
    """The namespaced-mutation shape, ``account(id) { pay(...) }``: the payment's charge is
    ``"{reference}:{account}"``, so a test counts each account's effects apart."""

    Arguments = PayArguments
    Output = Paid

    def mutate(account: int, info: Any, reference: str, amount: int, fail: bool) -> dict[str, Any]:
        return _pay(info, f"{reference}:{account}", amount, fail)


@idempotent
class PayAsync(graphene.Mutation):
    Arguments = PayArguments
    Output = Paid

    async def mutate(
        account: int, info: Any, reference: str, amount: int, fail: bool
    ) -> dict[str, Any]:
        return await sync_to_async(_pay)(info, f"{reference}:{account}", amount, fail)


class Upload(graphene.Scalar):
    """The GraphQL multipart request spec's file, as graphene-file-upload defines it: the
    view puts the uploaded file where the ``map`` field says, and the value is the file."""

    @staticmethod
    def serialize(value: Any) -> Any:
        return value

    @staticmethod
    def parse_literal(node: Any, _variables: Any = None) -> Any:
        return node

    @staticmethod
    def parse_value(value: Any) -> Any:
        return value


@idempotent
class Attach(graphene.Mutation):
    """A payment of an uploaded file's size: the file's content is part of the call."""

    class Arguments:
        reference = graphene.String(required=True)
        file = Upload(required=True)

    Output = Paid

    def mutate(root: Any, info: Any, reference: str, file: Any) -> dict[str, Any]:
        return _charge(info, reference, len(file.read()), False, False)


class AccountOps(graphene.ObjectType):
    pay = Pay.Field()
    pay_async = PayAsync.Field()


class Query(graphene.ObjectType):
    ping = graphene.String(default_value="pong")


class Mutation(graphene.ObjectType):
    charge = PayCharge.Field()
    charge_async = PayChargeAsync.Field()
    attach = Attach.Field()
    account = graphene.Field(AccountOps, id=graphene.Int(required=True))
    accounts = graphene.List(AccountOps, ids=graphene.List(graphene.Int, required=True))

    def resolve_account(root: Any, info: Any, id: int) -> int:
        return id

    def resolve_accounts(root: Any, info: Any, ids: list[int]) -> list[int]:
        return ids


schema = graphene.Schema(query=Query, mutation=Mutation)


class UploadGraphQLView(GraphQLView):
    """graphene-django's view taking the GraphQL multipart request spec (as
    graphene-file-upload's ``FileUploadGraphQLView`` does): ``operations`` (one request or a
    batch's list), ``map`` (each file's places in it) and the files."""

    def parse_body(self, request: HttpRequest) -> Any:
        if self.get_content_type(request) != "multipart/form-data":
            return super().parse_body(request)
        operations = json.loads(request.POST.get("operations", "{}"))
        for name, places in json.loads(request.POST.get("map", "{}")).items():
            for place in places:
                *above, last = place.split(".")
                holder = operations
                for step in above:
                    holder = holder[int(step) if isinstance(holder, list) else step]
                holder[last] = request.FILES[name]
        return operations


urlpatterns = [
    path(
        "",
        csrf_exempt(
            GraphQLView.as_view(schema=schema, execution_context_class=IdempotentExecutionContext)
        ),
    ),
    path(
        "batch/",
        csrf_exempt(
            GraphQLView.as_view(
                schema=schema, batch=True, execution_context_class=IdempotentExecutionContext
            )
        ),
    ),
    path(
        "uploads/",
        csrf_exempt(
            UploadGraphQLView.as_view(
                schema=schema, execution_context_class=IdempotentExecutionContext
            )
        ),
    ),
    path(
        "batch/uploads/",
        csrf_exempt(
            UploadGraphQLView.as_view(
                schema=schema, batch=True, execution_context_class=IdempotentExecutionContext
            )
        ),
    ),
    path("misconfigured/", csrf_exempt(GraphQLView.as_view(schema=schema))),
]
