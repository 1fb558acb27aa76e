"""Idempotent Graphene mutations: a thin adapter to :mod:`.graphql_fields`.

Two pieces, as for Strawberry: the class decorator marks a ``graphene.Mutation``
as protected and gives it its key argument; the execution context runs a
protected field (resolver *and* selection set) inside the claim's transaction,
stores the field's value as the response shows it, and replays it::

    @idempotent
    class Checkout(graphene.Mutation):
        class Arguments:
            amount = graphene.Int(required=True)

        charge = graphene.Field(ChargeType)

        def mutate(root, info, amount): ...

    GraphQLView.as_view(schema=schema, execution_context_class=IdempotentExecutionContext)

Importing this module imports Graphene; importing ``idempotency_django`` does not.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from inspect import iscoroutinefunction
from typing import Any, TypeVar, Unpack, overload

from idempotency_django._adapters.extras import raise_missing_extra

try:
    import graphene
except ModuleNotFoundError as error:  # pragma: no cover  (tested in a subprocess)
    raise_missing_extra(error, __name__, "graphene")
from django.http import HttpRequest
from graphql import ExecutionContext, GraphQLField

from idempotency_django._adapters import graphql_fields
from idempotency_django._adapters.graphql_fields import (
    ARGUMENT_HELP,
    KEY_ARGUMENT,
    Protection,
    Sent,
)
from idempotency_django._conf import conf
from idempotency_django._protocol.options import MUTATION_OPTIONS, MutationOptions, build_for

MutationClass = TypeVar("MutationClass", bound=type[graphene.Mutation])
_PROTECTION = "_idempotency_protection"  # on a protected mutation's resolver
_PYTHON_NAME = "idempotency_key"


@overload
def idempotent(mutation: MutationClass, /) -> MutationClass: ...


@overload
def idempotent(
    *, argument: str | None = KEY_ARGUMENT, **options: Unpack[MutationOptions]
) -> Callable[[MutationClass], MutationClass]: ...


def idempotent(
    mutation: Any = None, /, *, argument: str | None = KEY_ARGUMENT, **kwargs: Any
) -> Any:
    """Protect a ``graphene.Mutation``: ``@idempotent`` or ``@idempotent(ttl=3600, ...)``.

    Takes ``@idempotent``'s options (but ``methods``, ``key`` and ``fingerprint``)
    and ``argument``: the name of the key argument it adds (``None``: the header only).
    """
    for name in ("methods", "key", "fingerprint"):
        if name in kwargs:
            raise TypeError(f"A protected GraphQL mutation takes no {name}= option.")
    if argument is not None and not argument.isidentifier():
        raise TypeError(f"@idempotent(argument=...) must be a GraphQL name, got {argument!r}.")
    # redact= as Graphene's mutations have always taken it (Strawberry's never did).
    options = build_for("idempotent", kwargs, (*MUTATION_OPTIONS, "redact"))
    protection = Protection(options, argument)
    if mutation is None:
        return functools.partial(_protect, protection=protection)
    return _protect(mutation, protection=protection)


def _protect(mutation: MutationClass, *, protection: Protection) -> MutationClass:
    if not (isinstance(mutation, type) and issubclass(mutation, graphene.Mutation)):
        raise TypeError(
            "@idempotent (idempotency_django.graphene) decorates a graphene.Mutation class."
        )
    meta = mutation._meta
    if protection.argument is not None:
        header = protection.options.header or conf.HEADER
        meta.arguments[_PYTHON_NAME] = graphene.String(
            name=protection.argument, description=ARGUMENT_HELP.format(header=header)
        )
    # Graphene freezes a type's options once the class is made; Mutation.Field() reads
    # the resolver from them, so that is where the guarded one must be.
    object.__setattr__(meta, "resolver", _guarded(meta.resolver, protection))
    return mutation


def _guarded(resolver: Callable[..., Any], protection: Protection) -> Callable[..., Any]:
    """The mutation's resolver, run only inside the idempotent execution context."""
    if iscoroutinefunction(resolver):

        async def guarded_async(root: Any, info: Any, **kwargs: Any) -> Any:
            kwargs.pop(_PYTHON_NAME, None)
            graphql_fields.entering(tuple(info.path.as_list()))
            return await resolver(root, info, **kwargs)

        guarded: Callable[..., Any] = guarded_async
    else:

        def guarded_sync(root: Any, info: Any, **kwargs: Any) -> Any:
            kwargs.pop(_PYTHON_NAME, None)
            graphql_fields.entering(tuple(info.path.as_list()))
            return resolver(root, info, **kwargs)

        guarded = guarded_sync
    guarded = functools.wraps(resolver)(guarded)
    setattr(guarded, _PROTECTION, protection)
    return guarded


def protection(field: GraphQLField) -> Protection | None:
    """The protection of a field of a Graphene schema, if its mutation is ``@idempotent``."""
    found = getattr(field.resolve, _PROTECTION, None)
    return found if isinstance(found, Protection) else None


def batch(request: HttpRequest) -> list[Sent] | None:
    """The batch a request carries as graphene-django's ``GraphQLView(batch=True)`` it was
    routed to reads it: its ``parse_body``, then ``get_graphql_params`` per item (which
    prefers the URL's query to the item's, and reads ``"operationName": "null"`` as none).
    ``None`` when no such view serves the request."""
    try:
        from graphene_django.views import GraphQLView
    except ImportError:  # pragma: no cover  (Graphene without graphene-django)
        return None
    view = graphql_fields.routed_view(request, GraphQLView)
    if view is None or not view.batch:
        return None
    sent: list[Sent] = []
    try:
        for entry in view.parse_body(request):
            query, variables, operation_name, _ = view.get_graphql_params(request, entry)
            sent.append(Sent(query, variables, operation_name))
    except Exception:  # noqa: BLE001  (the view fails there too: no item after this one runs)
        pass
    return sent


_STACK = graphql_fields.Stack(protection, batch)


class IdempotentExecutionContext(ExecutionContext):
    """``GraphQLView.as_view(..., execution_context_class=IdempotentExecutionContext)``
    (or ``schema.execute(..., execution_context_class=...)``).

    Executes the ``@idempotent`` mutations idempotently; every other field as graphql-core does.
    """

    def execute_field(self, *args: Any) -> Any:
        return graphql_fields.execute_field(self, _STACK, super().execute_field, *args)

    def handle_field_error(self, *args: Any) -> Any:
        graphql_fields.note_error(self)
        return super().handle_field_error(*args)


__all__ = ["IdempotentExecutionContext", "idempotent"]
