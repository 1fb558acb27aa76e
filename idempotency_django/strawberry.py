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

from datetime import timedelta
from typing import Any

from idempotency_django._adapters.extras import raise_missing_extra

try:
    import strawberry  # noqa: F401
except ModuleNotFoundError as error:  # pragma: no cover  (tested in a subprocess)
    raise_missing_extra(error, __name__, "strawberry")
from graphql import GraphQLField
from strawberry.annotation import StrawberryAnnotation
from strawberry.extensions.field_extension import (
    AsyncExtensionResolver,
    FieldExtension,
    SyncExtensionResolver,
)
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext
from strawberry.types import Info
from strawberry.types.arguments import StrawberryArgument
from strawberry.types.field import StrawberryField

from idempotency_django._adapters import graphql_fields
from idempotency_django._adapters.graphql_fields import ARGUMENT_HELP, KEY_ARGUMENT, Protection
from idempotency_django._conf import TenantResolver, conf
from idempotency_django._protocol.options import Options

_DEFINITION = "strawberry-definition"  # where Strawberry keeps a GraphQLField's StrawberryField
_PYTHON_NAME = "idempotency_key"


class IdempotentExtension(FieldExtension):
    """Protect one mutation field: ``extensions=[IdempotentExtension(ttl=3600, ...)]``.

    Takes ``@idempotent``'s options (``header``, ``required``, ``ttl``, ``lease``,
    ``tenant``, ``database``, ``cache``, ``protocol``, ``wait``) and ``argument``: the
    name of the key argument it adds to the field (``None``: the header only).
    """

    def __init__(
        self,
        *,
        argument: str | None = KEY_ARGUMENT,
        header: str | None = None,
        required: bool | None = None,
        ttl: float | timedelta | None = None,
        lease: float | timedelta | None = None,
        tenant: TenantResolver | None = None,
        database: str | None = None,
        cache: str | None = None,
        protocol: str | None = None,
        wait: float | timedelta | None = None,
    ) -> None:
        options = Options.build(
            header=header,
            required=required,
            ttl=ttl,
            lease=lease,
            tenant=tenant,
            database=database,
            cache=cache,
            protocol=protocol,
            wait=wait,
        )
        if argument is not None and not argument.isidentifier():
            raise TypeError(
                f"IdempotentExtension(argument=...) must be a GraphQL name, got {argument!r}."
            )
        self.protection = Protection(options, argument)

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


class IdempotentExecutionContext(StrawberryGraphQLCoreExecutionContext):
    """``strawberry.Schema(..., execution_context_class=IdempotentExecutionContext)``.

    Executes the fields that carry an :class:`IdempotentExtension` idempotently; every
    other field exactly as Strawberry does.
    """

    def execute_field(self, *args: Any) -> Any:
        return graphql_fields.execute_field(self, protection, super().execute_field, *args)

    def handle_field_error(self, *args: Any) -> Any:
        graphql_fields.note_error(self)
        return super().handle_field_error(*args)


__all__ = ["IdempotentExecutionContext", "IdempotentExtension"]
