"""The GraphQL API beside the REST ones, at ``/graphql/`` (Strawberry): a checkout mutation.

``checkout`` takes its key in its ``idempotencyKey`` argument or the
``Idempotency-Key`` header; a retry replays the first answer (the payload as the
response showed it), a refused amount is a "user error" in the payload (stored
and replayed like a success). ``/graphql/async/`` serves the same schema
asynchronously, where ``checkoutAsync`` (an ``async def`` resolver) runs too.
The caller is the session's user, as on the other endpoints.
"""

from __future__ import annotations

import strawberry
from asgiref.sync import sync_to_async
from django.http import HttpRequest
from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from strawberry.django.views import AsyncGraphQLView, GraphQLView

from idempotency_django.strawberry import IdempotentExecutionContext, IdempotentExtension
from sample_project.payments.models import Charge


@strawberry.type
class ChargeType:
    id: strawberry.ID
    amount: int
    currency: str
    description: str


@strawberry.type
class UserError:
    field: str
    message: str


@strawberry.type
class CheckoutPayload:
    charge: ChargeType | None
    errors: list[UserError]


def _checkout(
    request: HttpRequest, amount: int, currency: str, description: str
) -> CheckoutPayload:
    if amount <= 0:
        return CheckoutPayload(
            charge=None, errors=[UserError(field="amount", message="must be positive")]
        )
    user = request.user if request.user.is_authenticated else None
    charge = Charge.objects.create(
        user=user,
        amount=amount,
        currency=currency,
        description=description,
        provider_key=request.idempotency.derive("provider"),  # type: ignore[attr-defined]
    )
    return CheckoutPayload(charge=_charge(charge), errors=[])


def _charge(charge: Charge) -> ChargeType:
    return ChargeType(
        id=strawberry.ID(str(charge.pk)),
        amount=charge.amount,
        currency=charge.currency,
        description=charge.description,
    )


@strawberry.type
class Query:
    @strawberry.field
    def charge(self, id: strawberry.ID) -> ChargeType | None:
        found = Charge.objects.filter(pk=id).first()
        return None if found is None else _charge(found)


@strawberry.type
class Mutation:
    @strawberry.mutation(extensions=[IdempotentExtension()])
    def checkout(
        self, info: strawberry.Info, amount: int, currency: str = "eur", description: str = ""
    ) -> CheckoutPayload:
        """Take a payment once, however often it is retried with the same key."""
        return _checkout(info.context.request, amount, currency, description)

    @strawberry.mutation(extensions=[IdempotentExtension()])
    async def checkout_async(
        self, info: strawberry.Info, amount: int, currency: str = "eur", description: str = ""
    ) -> CheckoutPayload:
        """The same, as an ``async def`` resolver (served by ``/graphql/async/``)."""
        return await sync_to_async(_checkout)(info.context.request, amount, currency, description)


schema = strawberry.Schema(
    query=Query, mutation=Mutation, execution_context_class=IdempotentExecutionContext
)

urlpatterns = [
    path("", csrf_exempt(GraphQLView.as_view(schema=schema)), name="graphql"),
    path("async/", csrf_exempt(AsyncGraphQLView.as_view(schema=schema)), name="graphql-async"),
]
