"""Idempotent Strawberry mutation fields: a thin adapter to :mod:`.graphql_fields`.

Two pieces, because a field's answer is more than its resolver's return value:
the field extension marks a field as protected and gives it its key argument;
the execution context runs a protected field (resolver *and* selection set)
inside the claim's transaction, stores the field's value as the response shows
it, and replays it::

    @strawberry.type
    class Mutation:
        @strawberry.mutation(extensions=[IdempotentExtension()])
        def checkout(self, info: strawberry.Info, cart: str) -> Order: ...

    schema = strawberry.Schema(
        query=Query, mutation=Mutation, execution_context_class=IdempotentExecutionContext
    )

Importing this module imports Strawberry; importing ``idempotency_django`` does not.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, Unpack

from idempotency_django._adapters.extras import raise_missing_extra

try:
    import strawberry  # noqa: F401
except ModuleNotFoundError as error:  # pragma: no cover  (tested in a subprocess)
    raise_missing_extra(error, __name__, "strawberry")
from django.http import HttpRequest
from graphql import DocumentNode, GraphQLField
from strawberry.annotation import StrawberryAnnotation
from strawberry.django.views import AsyncGraphQLView, GraphQLView
from strawberry.extensions.field_extension import (
    AsyncExtensionResolver,
    FieldExtension,
    SyncExtensionResolver,
)
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext
from strawberry.types import ExecutionContext, Info
from strawberry.types.arguments import StrawberryArgument
from strawberry.types.field import StrawberryField

from idempotency_django._adapters import graphql_fields
from idempotency_django._adapters.graphql_fields import (
    ARGUMENT_HELP,
    KEY_ARGUMENT,
    Protection,
    Sent,
)
from idempotency_django._conf import conf
from idempotency_django._protocol.options import MUTATION_OPTIONS, MutationOptions, build_for

_DEFINITION = "strawberry-definition"  # where Strawberry keeps a GraphQLField's StrawberryField
_PYTHON_NAME = "idempotency_key"


class IdempotentExtension(FieldExtension):
    """Protect one mutation field: ``extensions=[IdempotentExtension(ttl=3600, ...)]``.

    Takes a mutation's options (``MutationOptions``: ``@idempotent``'s but ``methods``,
    ``key``, ``fingerprint`` and ``redact``) and ``argument``: the name of the key
    argument it adds to the field (``None``: the header only).
    """

    def __init__(
        self, *, argument: str | None = KEY_ARGUMENT, **options: Unpack[MutationOptions]
    ) -> None:
        built = build_for("IdempotentExtension.__init__", options, MUTATION_OPTIONS)
        if argument is not None and not argument.isidentifier():
            raise TypeError(
                f"IdempotentExtension(argument=...) must be a GraphQL name, got {argument!r}."
            )
        self.protection = Protection(built, argument)

    def apply(self, field: StrawberryField) -> None:
        """Add the key argument, documented, to the field (read when the schema is built)."""
        argument = self.protection.argument
        if argument is None:
            return
        header = self.protection.options.header or conf.HEADER
        field.arguments = [
            *field.arguments,
            StrawberryArgument(
                python_name=_PYTHON_NAME,
                graphql_name=argument,
                type_annotation=StrawberryAnnotation(str | None),
                description=ARGUMENT_HELP.format(header=header),
                default=None,
            ),
        ]

    def resolve(self, next_: SyncExtensionResolver, source: Any, info: Info, **kwargs: Any) -> Any:
        kwargs.pop(_PYTHON_NAME, None)
        graphql_fields.entering(tuple(info.path.as_list()))
        return next_(source, info, **kwargs)

    async def resolve_async(
        self, next_: AsyncExtensionResolver, source: Any, info: Info, **kwargs: Any
    ) -> Any:
        kwargs.pop(_PYTHON_NAME, None)
        graphql_fields.entering(tuple(info.path.as_list()))
        return await next_(source, info, **kwargs)


def protection(field: GraphQLField) -> Protection | None:
    """The protection of a field of a Strawberry schema, if one of its extensions is ours."""
    definition = (field.extensions or {}).get(_DEFINITION)
    for extension in getattr(definition, "extensions", None) or ():
        if isinstance(extension, IdempotentExtension):
            return extension.protection
    return None


def batch(request: HttpRequest) -> list[Sent] | None:
    """The batch a request carries as the Strawberry view it was routed to reads it (its
    ``parse_http_body``: a JSON list, or a multipart request's ``operations`` list), or
    ``None``: not a batch, or no Strawberry view serves the request."""
    view = graphql_fields.routed_view(request, (GraphQLView, AsyncGraphQLView))
    if view is None:
        return None
    try:
        parsed = view.parse_http_body(view.request_adapter_class(request))
        if isinstance(view, AsyncGraphQLView):
            parsed = _now(parsed)
    except Exception:  # noqa: BLE001  # pragma: no cover  (the view parsed it before running it)
        return None
    if not isinstance(parsed, list):
        return None
    return [Sent(item.query, item.variables, item.operation_name) for item in parsed]


def _now(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """What ``coroutine`` returns, if it returns without waiting (the async view's parsing
    reads a Django request already in memory); ``None`` if it would wait."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    coroutine.close()
    return None


def operation_name(document: DocumentNode, sent: object) -> object:
    """The name Strawberry runs ``document`` under: the one sent, else its first operation's
    (its ``ExecutionContext.operation_name``; graphql-core alone would run none of many)."""
    context = ExecutionContext(
        query=None,
        schema=None,  # type: ignore[arg-type]  # unread by operation_name
        allowed_operations=(),
        provided_operation_name=sent,  # type: ignore[arg-type]  # as the view passes it on
        graphql_document=document,
    )
    return context.operation_name


_STACK = graphql_fields.Stack(protection, batch, operation_name)


class IdempotentExecutionContext(StrawberryGraphQLCoreExecutionContext):
    """``strawberry.Schema(..., execution_context_class=IdempotentExecutionContext)``.

    Executes the fields that carry an :class:`IdempotentExtension` idempotently; every
    other field exactly as Strawberry does.
    """

    def execute_field(self, *args: Any) -> Any:
        return graphql_fields.execute_field(self, _STACK, super().execute_field, *args)

    def handle_field_error(self, *args: Any) -> Any:
        graphql_fields.note_error(self)
        return super().handle_field_error(*args)


__all__ = ["IdempotentExecutionContext", "IdempotentExtension"]
