"""A Strawberry API of charges (``payments/graphql_api.py``): one protected mutation."""

from __future__ import annotations

import strawberry
from asgiref.sync import sync_to_async
from django.http import HttpRequest
from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from strawberry.django.views import AsyncGraphQLView, GraphQLView

from idempotency_django import idempotency_of
from idempotency_django.strawberry import IdempotentExecutionContext, IdempotentExtension

from .models import Charge


@strawberry.type
class ChargeType:
    id: strawberry.ID
    amount: int


@strawberry.type
class UserError:
    field: str
    message: str


@strawberry.type
class CheckoutPayload:
    charge: ChargeType | None
    errors: list[UserError]


def _checkout(request: HttpRequest, amount: int) -> CheckoutPayload:
    if amount <= 0:  # a "user error": an answer, stored and replayed like a success
        error = UserError(field="amount", message="must be positive")
        return CheckoutPayload(charge=None, errors=[error])
    charge = Charge.objects.create(
        user=request.user if request.user.is_authenticated else None,
        amount=amount,
        provider_key=idempotency_of(request).derive("provider"),
    )
    return CheckoutPayload(
        charge=ChargeType(id=strawberry.ID(str(charge.pk)), amount=amount), errors=[]
    )


@strawberry.type
class Query:
    @strawberry.field
    def ping(self) -> str:
        return "pong"


@strawberry.type
class Mutation:
    @strawberry.mutation(extensions=[IdempotentExtension()])
    def checkout(self, info: strawberry.Info, amount: int) -> CheckoutPayload:
        """Take a payment once, however often it is retried with the same key."""
        return _checkout(info.context.request, amount)

    @strawberry.mutation(extensions=[IdempotentExtension()])
    async def checkout_async(self, info: strawberry.Info, amount: int) -> CheckoutPayload:
        """The same as an ``async def`` resolver (served by the async view)."""
        return await sync_to_async(_checkout)(info.context.request, amount)


schema = strawberry.Schema(
    query=Query, mutation=Mutation, execution_context_class=IdempotentExecutionContext
)

urlpatterns = [
    path("", csrf_exempt(GraphQLView.as_view(schema=schema))),
    path("async/", csrf_exempt(AsyncGraphQLView.as_view(schema=schema))),
]
