"""A Graphene API of charges (``payments/graphene_api.py``): one protected mutation."""

from __future__ import annotations

from typing import Any

import graphene
from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from graphene_django.views import GraphQLView

from idempotency_django import idempotency_of
from idempotency_django.graphene import IdempotentExecutionContext, idempotent

from .models import Charge


class ChargeType(graphene.ObjectType):
    id = graphene.Int()
    amount = graphene.Int()


class UserError(graphene.ObjectType):
    field = graphene.String()
    message = graphene.String()


@idempotent
class Checkout(graphene.Mutation):
    class Arguments:
        amount = graphene.Int(required=True)

    charge = graphene.Field(ChargeType)
    errors = graphene.List(graphene.NonNull(UserError), required=True)

    def mutate(root: Any, info: Any, amount: int) -> Checkout:
        if amount <= 0:  # a "user error": an answer, stored and replayed like a success
            return Checkout(errors=[UserError(field="amount", message="must be positive")])
        request = info.context  # Graphene's context is the request itself
        charge = Charge.objects.create(
            user=request.user if request.user.is_authenticated else None,
            amount=amount,
            provider_key=idempotency_of(request).derive("provider"),
        )
        return Checkout(charge=charge, errors=[])


class Query(graphene.ObjectType):
    ping = graphene.String(default_value="pong")


class Mutation(graphene.ObjectType):
    checkout = Checkout.Field()


schema = graphene.Schema(query=Query, mutation=Mutation)

urlpatterns = [
    path(
        "",
        csrf_exempt(
            GraphQLView.as_view(schema=schema, execution_context_class=IdempotentExecutionContext)
        ),
    ),
]
