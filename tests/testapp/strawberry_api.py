"""A Strawberry schema whose mutations are protected, served sync and async (``tests/test_strawberry.py``)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import strawberry
from asgiref.sync import sync_to_async
from django.db import connection
from django.db.models import Count
from django.http import HttpRequest
from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from strawberry.django.views import AsyncGraphQLView, GraphQLView
from strawberry.file_uploads import Upload
from strawberry.schema.config import StrawberryConfig

from idempotency_django.strawberry import IdempotentExecutionContext, IdempotentExtension
from tests.testapp.models import Charge

# reference -> (entered, release): a held resolver waits inside its transaction for the test.
held: dict[str, tuple[threading.Event, threading.Event]] = {}
# How often each reference's resolver body ran (user errors write nothing to count).
calls: dict[str, int] = {}


@strawberry.type
class UserError:
    field: str
    message: str


@strawberry.type
class ChargePayload:
    id: strawberry.ID | None
    reference: str
    amount: int
    caller: str
    errors: list[UserError]
    explode: strawberry.Private[bool] = False

    @strawberry.field
    def committed(self) -> int | None:
        """Read when the field is completed, inside the claim's transaction."""
        if self.explode:
            raise ValueError("a sub-field failed")
        return int(Charge.objects.filter(reference=self.reference).aggregate(n=Count("id"))["n"])


@strawberry.type
class AsyncChargePayload(ChargePayload):
    @strawberry.field
    async def committed(self) -> int | None:
        """The same count, read by an ``async`` sub-field (on the event loop)."""
        if self.explode:
            raise ValueError("a sub-field failed")
        return await Charge.objects.filter(reference=self.reference).acount()


def _charge(
    request: HttpRequest, reference: str, amount: int, fail: bool, hold: bool, explode: bool
) -> ChargePayload:
    calls[reference] = calls.get(reference, 0) + 1
    caller = request.user.get_username() if request.user.is_authenticated else ""
    if amount < 0:
        error = UserError(field="amount", message="must not be negative")
        return ChargePayload(
            id=None, reference=reference, amount=amount, caller=caller, errors=[error]
        )
    charge = Charge.objects.create(reference=reference, amount=amount)
    if hold:
        entered, release = held[reference]
        entered.set()
        assert release.wait(30), "the test never released the held resolver"
    if fail:
        raise RuntimeError("the resolver failed after its write")
    return ChargePayload(
        id=strawberry.ID(str(charge.pk)),
        reference=reference,
        amount=amount,
        caller=caller,
        errors=[],
        explode=explode,
    )


@strawberry.type
class Query:
    @strawberry.field
    def ping(self) -> str:
        return "pong"


@strawberry.type
class AccountOps:
    """The namespaced-mutation shape, ``account(id) { pay(...) }``: the payment's charge is
    ``"{reference}:{account}"``, so a test counts each account's effects apart."""

    account: strawberry.Private[int]

    @strawberry.mutation(extensions=[IdempotentExtension()])
    def pay(
        self, info: strawberry.Info, reference: str, amount: int = 100, fail: bool = False
    ) -> ChargePayload | None:  # nullable: a failing payment leaves its siblings' data
        return _pay(info.context.request, f"{reference}:{self.account}", amount, fail)

    @strawberry.mutation(extensions=[IdempotentExtension()])
    async def pay_async(
        self, info: strawberry.Info, reference: str, amount: int = 100, fail: bool = False
    ) -> AsyncChargePayload | None:
        reference = f"{reference}:{self.account}"
        paid = await sync_to_async(_pay)(info.context.request, reference, amount, fail)
        return AsyncChargePayload(**vars(paid))


# reference -> how many atomic blocks were open where a payment ran (its claim's, and any
# around it): two payments of one document, each in a transaction of its own, see one depth.
depths: dict[str, int] = {}


def _pay(request: HttpRequest, reference: str, amount: int, fail: bool) -> ChargePayload:
    depths[reference] = len(connection.atomic_blocks)
    return _charge(request, reference, amount, fail, False, False)


@strawberry.type
class Mutation:
    @strawberry.field
    def account(self, id: int) -> AccountOps:
        return AccountOps(account=id)

    @strawberry.field
    def accounts(self, ids: list[int]) -> list[AccountOps]:
        return [AccountOps(account=id) for id in ids]

    @strawberry.mutation(extensions=[IdempotentExtension()])
    def charge(
        self,
        info: strawberry.Info,
        reference: str,
        amount: int = 100,
        fail: bool = False,
        hold: bool = False,
        explode: bool = False,
    ) -> ChargePayload:
        return _charge(info.context.request, reference, amount, fail, hold, explode)

    @strawberry.mutation(extensions=[IdempotentExtension()])
    async def charge_async(
        self,
        info: strawberry.Info,
        reference: str,
        amount: int = 100,
        fail: bool = False,
        hold: bool = False,
        explode: bool = False,
    ) -> AsyncChargePayload:
        request = info.context.request
        paid = await sync_to_async(_charge)(request, reference, amount, fail, hold, explode)
        return AsyncChargePayload(**vars(paid))

    @strawberry.mutation(extensions=[IdempotentExtension(argument=None, required=False)])
    def header_only(self, info: strawberry.Info, reference: str) -> ChargePayload:
        return _charge(info.context.request, reference, 1, False, False, False)

    @strawberry.mutation(extensions=[IdempotentExtension()])
    def charge_id(self, reference: str) -> int:
        """A protected field without a selection set."""
        return Charge.objects.create(reference=reference, amount=1).pk

    @strawberry.mutation(extensions=[IdempotentExtension()])
    def attach(self, info: strawberry.Info, reference: str, file: Upload) -> ChargePayload:
        """A payment of an uploaded file's size: the file's content is part of the call."""
        size = len(file.read())  # type: ignore[attr-defined]  # Django's UploadedFile
        return _charge(info.context.request, reference, size, False, False, False)

    @strawberry.mutation
    def unprotected(self, reference: str) -> int:
        return Charge.objects.create(reference=reference, amount=1).pk


schema = strawberry.Schema(
    query=Query, mutation=Mutation, execution_context_class=IdempotentExecutionContext
)
# The same schema with Strawberry's batching on: a request may carry several operations.
batching = strawberry.Schema(
    query=Query,
    mutation=Mutation,
    execution_context_class=IdempotentExecutionContext,
    config=StrawberryConfig(batching_config={"max_operations": 10}),
)
# The same types without our execution context: a protected field refuses to run.
misconfigured = strawberry.Schema(query=Query, mutation=Mutation)


class WaitingAsyncGraphQLView(AsyncGraphQLView):
    """An async view whose parsing waits (a project's override reading something async):
    the batch can't be read before it runs."""

    async def parse_http_body(self, request: Any) -> Any:
        await asyncio.sleep(0)
        return await super().parse_http_body(request)


urlpatterns = [
    path("", csrf_exempt(GraphQLView.as_view(schema=schema))),
    path("async/", csrf_exempt(AsyncGraphQLView.as_view(schema=schema))),
    path("batch/", csrf_exempt(GraphQLView.as_view(schema=batching))),
    path("async/batch/", csrf_exempt(AsyncGraphQLView.as_view(schema=batching))),
    # Batching with uploads: a multipart request's ``operations`` field may be a list too.
    path(
        "batch/uploads/",
        csrf_exempt(GraphQLView.as_view(schema=batching, multipart_uploads_enabled=True)),
    ),
    path(
        "async/batch/uploads/",
        csrf_exempt(AsyncGraphQLView.as_view(schema=batching, multipart_uploads_enabled=True)),
    ),
    path(
        "uploads/", csrf_exempt(GraphQLView.as_view(schema=schema, multipart_uploads_enabled=True))
    ),
    path(
        "async/uploads/",
        csrf_exempt(AsyncGraphQLView.as_view(schema=schema, multipart_uploads_enabled=True)),
    ),
    path("async/batch/waiting/", csrf_exempt(WaitingAsyncGraphQLView.as_view(schema=batching))),
    path("misconfigured/", csrf_exempt(GraphQLView.as_view(schema=misconfigured))),
]
