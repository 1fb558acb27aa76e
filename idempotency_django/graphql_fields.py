"""Idempotent GraphQL mutation fields: the graphql-core part the Strawberry and Graphene
adapters share, a thin layer over :func:`idempotency_django.core.protect`.

A protected field is executed by the stack's execution context (graphql-core's
``execute_field``), so that what runs inside the claim's transaction is the field
*and its selection set*: the resolver, then every sub-field's resolver. What is
stored is the field's value exactly as it stands in the response's ``data`` (as
JSON), and a replay returns that value without running any resolver; the
response is the same, byte for byte, whatever the sub-fields would read today.

- The key is the field's own key argument (``idempotencyKey``) when the document
  gives one, else the request's ``Idempotency-Key`` header: the argument wins, so a
  document may carry two protected mutations, each with its own key. A document in
  which two protected fields would both take the header's key is refused as a whole.
- Tenant, options, fingerprints, protocols and replays are ``@idempotent``'s: the
  answer is stored under the request's key space, as a view's would be.
- A field that raises (or whose sub-fields raise) stores nothing: its writes roll
  back and the key is free. "User errors" returned in the payload are data: stored
  and replayed like any final answer.
- A refusal (400, 409, 422, 503) is a GraphQL error on the field, with
  ``extensions.code`` (the problem's code) and ``extensions.type`` (its URI).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.core.exceptions import ImproperlyConfigured
from django.core.serializers.json import DjangoJSONEncoder
from django.http import HttpRequest, HttpResponse

from idempotency_django import core
from idempotency_django.exceptions import IdempotencyError, KeyMissing
from idempotency_django.fingerprint import arguments_digest
from idempotency_django.options import Options, Policy

try:
    from graphql import (
        FieldNode,
        FragmentDefinitionNode,
        FragmentSpreadNode,
        GraphQLError,
        GraphQLField,
        GraphQLObjectType,
        InlineFragmentNode,
        SelectionSetNode,
        StringValueNode,
        VariableNode,
        Visitor,
        print_ast,
        visit,
    )
except ModuleNotFoundError as error:  # pragma: no cover  (an adapter's extra brings graphql-core)
    raise ModuleNotFoundError(
        f"{__name__} needs graphql-core: pip install 'idempotency-django[strawberry]'",
        name=error.name,
    ) from error

#: The documentation's anchor for the refusals that are GraphQL's own.
DOCS = "https://idempotency-django.readthedocs.io/en/latest/graphql.html#"
KEY_ARGUMENT = "idempotencyKey"
ARGUMENT_HELP = (
    "Idempotency key of this mutation (any client-chosen unique string, e.g. a UUID): "
    "a retry with the same key and arguments replays the first answer instead of running "
    "again. Overrides the {header} header, which may key only one protected field per document."
)


class KeyShared(IdempotencyError):
    """Two protected fields of one document would take the same header key."""

    status, code = 400, "key-shared"
    title = "Idempotency key shared by two fields"
    default_detail = (
        "Two protected mutation fields of this document would take the same key from the "
        "{header} header: give each its own key in its idempotencyKey argument."
    )

    @property
    def type_uri(self) -> str:
        return DOCS + self.code


@dataclass(frozen=True)
class Protection:
    """How one field is protected: ``@idempotent``'s options and its key argument's name."""

    options: Options
    argument: str | None = KEY_ARGUMENT


@dataclass
class _Running:
    """The protected field being executed, as its resolver (wrapper) sees it."""

    path: tuple[str | int, ...]
    refusal: Exception | None = None


_running: ContextVar[_Running | None] = ContextVar("idempotency_graphql_field", default=None)
_ERRORS = "_idempotency_graphql_errors"  # on the execution context: its field errors so far
_CHECKED = "_idempotency_graphql_checked"  # on the execution context: the document was checked


def entering(path: tuple[str | int, ...]) -> None:
    """Called by the field's resolver wrapper before the resolver: raise if it must not run.

    Raises the refusal the execution context decided (it becomes the field's GraphQL
    error), or ``ImproperlyConfigured`` when no idempotent execution context runs it.
    """
    running = _running.get()
    if running is None or running.path != path:
        raise ImproperlyConfigured(
            "This GraphQL field is protected by idempotency_django, but the schema does not "
            "execute it with idempotency_django's execution context: pass "
            "execution_context_class=IdempotentExecutionContext to the schema (see the "
            "GraphQL page of the documentation)."
        )
    if running.refusal is not None:
        raise running.refusal


def note_error(executor: object) -> None:
    """Count a field error of ``executor``: a protected field with new errors stores nothing."""
    setattr(executor, _ERRORS, getattr(executor, _ERRORS, 0) + 1)


def execute_field(
    executor: Any,
    protection_of: Callable[[GraphQLField], Protection | None],
    run: Callable[..., Any],
    parent_type: GraphQLObjectType,
    source: Any,
    nodes: Any,
    path: Any,
    *rest: Any,
) -> Any:
    """graphql-core's ``execute_field`` (``run``), protected when the field is.

    ``nodes`` is graphql-core 3.2's list of field nodes or 3.3's field details.
    """
    if path.prev is None and not getattr(executor, _CHECKED, False):
        setattr(executor, _CHECKED, True)
        _refuse_a_shared_key(executor, protection_of, parent_type)
    first = _field_nodes(nodes)[0]
    definition = parent_type.fields.get(first.name.value)
    protection = None if definition is None else protection_of(definition)
    if protection is None:
        return run(parent_type, source, nodes, path, *rest)
    field_run = _FieldRun(
        executor,
        protection,
        functools.partial(run, parent_type, source, nodes, path, *rest),
        _Running(tuple(path.as_list())),
        _field_nodes(nodes),
        parent_type,
    )
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return field_run.execute()
    return sync_to_async(field_run.execute)()


@dataclass
class _FieldRun:
    """One protected field of one request: claim, execute (or replay), answer."""

    executor: Any
    protection: Protection
    run: Callable[[], Any]
    running: _Running
    nodes: list[FieldNode]
    parent_type: GraphQLObjectType
    request: HttpRequest | None = field(default=None, init=False)

    def execute(self) -> Any:
        """Synchronous: the claim's transaction is held on this thread (a worker thread
        under ``async`` execution, where an ``async`` resolver runs back on the event loop
        through ``async_to_sync``, its ``sync_to_async`` database calls on this thread)."""
        token = _running.set(self.running)
        try:
            return self._answer()
        finally:
            _running.reset(token)

    def _answer(self) -> Any:
        try:
            self.request = request_of(self.executor.context_value)
            policy = self._policy()
            response = core.protect(self.request, policy, self._tenant(policy), self._call)
        except _FieldFailed as failed:
            return failed.value
        except GraphQLError:
            raise  # a non-null field's error, propagating to its parent as graphql-core does
        except IdempotencyError as error:
            return self._refused(graphql_error(error))
        except Exception as error:  # noqa: BLE001  (reported as the field's error, as a resolver's)
            return self._refused(error)
        return json.loads(response.content)

    def _policy(self) -> Policy:
        assert self.request is not None
        policy = self.protection.options.resolve(self.request)
        values = variable_values(self.executor)
        key = argument_key(self.nodes[0], self.protection, values)
        if key is None and policy.required and self.request.headers.get(policy.header) is None:
            raise KeyMissing(_missing(self.protection, policy.header))
        digest = fingerprint(self.executor, self.parent_type, self.nodes, self.protection)
        return replace(
            policy,
            key=None if key is None else (lambda _request: key),
            fingerprint=lambda _request: digest,
        )

    def _tenant(self, policy: Policy) -> core.TenantOf:
        request = self.request
        assert request is not None
        return lambda: policy.tenant(request)

    def _call(self) -> HttpResponse:
        """Inside the claim's transaction: the field, completed; its errors roll it back."""
        before = getattr(self.executor, _ERRORS, 0)
        value = settled(self.run())
        if getattr(self.executor, _ERRORS, 0) != before:
            raise _FieldFailed(value)
        body = json.dumps(value, cls=DjangoJSONEncoder, separators=(",", ":"))
        return HttpResponse(body, content_type="application/json")

    def _refused(self, error: Exception) -> Any:
        """Execute the field with its resolver raising ``error``: graphql-core reports it."""
        self.running.refusal = error
        return settled(self.run())


class _FieldFailed(Exception):
    """Leaves the claim's transaction (rolled back) with the field's value and errors."""

    def __init__(self, value: Any) -> None:
        super().__init__("a protected GraphQL field failed")
        self.value = value


def settled(value: Any) -> Any:
    """``value``, awaited on the event loop when it is awaitable (from a worker thread)."""
    if not inspect.isawaitable(value):
        return value

    async def wait(awaitable: Awaitable[Any]) -> Any:
        return await awaitable

    return async_to_sync(wait)(value)


def graphql_error(error: IdempotencyError) -> GraphQLError:
    """A refusal as a GraphQL error: the problem's code, type URI and status in its extensions."""
    extensions: dict[str, Any] = {
        "code": error.code,
        "type": error.type_uri,
        "status": error.status,
    }
    retry = error.headers().get("Retry-After")
    if retry is not None:
        extensions["retryAfter"] = int(retry)
    return GraphQLError(error.detail, extensions=extensions)


def request_of(context: object) -> HttpRequest:
    """The Django request of a GraphQL context: Strawberry's ``.request``, Graphene's itself."""
    if isinstance(context, HttpRequest):
        return context
    request = context.get("request") if isinstance(context, Mapping) else None
    request = getattr(context, "request", request)
    if not isinstance(request, HttpRequest):
        raise ImproperlyConfigured(
            "An idempotent GraphQL field needs the Django request in info.context "
            "(info.context.request, or info.context itself): execute the schema through "
            "its Django view, or pass the request in the context."
        )
    return request


def variable_values(executor: Any) -> Mapping[str, Any]:
    """The operation's coerced variables (graphql-core 3.3 wraps them, 3.2 does not)."""
    values = executor.variable_values
    coerced = getattr(values, "coerced", values)
    return coerced if isinstance(coerced, Mapping) else {}


def fragment_definitions(executor: Any) -> Mapping[str, FragmentDefinitionNode]:
    found = getattr(executor, "fragment_definitions", None) or executor.fragments
    return found if isinstance(found, Mapping) else {}


def argument_key(node: FieldNode, protection: Protection, values: Mapping[str, Any]) -> Any:
    """The key the document gives in the field's key argument, or ``None``."""
    for argument in node.arguments or ():
        if argument.name.value != protection.argument:
            continue
        value = argument.value
        if isinstance(value, VariableNode):
            return values.get(value.name.value)
        if isinstance(value, StringValueNode):
            return value.value
    return None  # absent, or null


def fingerprint(
    executor: Any, parent_type: GraphQLObjectType, nodes: list[FieldNode], protection: Protection
) -> str:
    """What "the same request" is for a field: its arguments (but the key), its directives,
    its selection set, and the variables and fragments these use. Not its alias: the
    stored value is the field's, whatever the response calls it."""
    fragments = fragment_definitions(executor)
    parts: list[Any] = [f"{parent_type.name}.{nodes[0].name.value}"]
    uses = _Uses()
    for node in nodes:
        arguments = [a for a in node.arguments or () if a.name.value != protection.argument]
        pieces = [*arguments, *(node.directives or ())]
        if node.selection_set is not None:
            pieces.append(node.selection_set)
        for piece in pieces:
            visit(piece, uses)
        parts.append([print_ast(piece) for piece in pieces])
    seen: dict[str, str] = {}
    while pending := sorted(uses.fragments - seen.keys()):
        for name in pending:
            definition = fragments.get(name)
            seen[name] = "" if definition is None else print_ast(definition)
            if definition is not None:
                visit(definition, uses)
    values = variable_values(executor)
    used = {name: values.get(name) for name in sorted(uses.variables)}
    canonical = json.dumps([parts, seen, used], sort_keys=True, default=_plain)
    return arguments_digest(canonical)


def _plain(value: object) -> object:
    """A coerced variable that is no JSON value (an input object instance, a Decimal)."""
    attributes = getattr(value, "__dict__", None)
    return attributes if attributes is not None else str(value)


class _Uses(Visitor):
    """The variables and fragments a piece of a document refers to."""

    def __init__(self) -> None:
        super().__init__()
        self.variables: set[str] = set()
        self.fragments: set[str] = set()

    def enter_variable(self, node: VariableNode, *_: Any) -> None:
        self.variables.add(node.name.value)

    def enter_fragment_spread(self, node: FragmentSpreadNode, *_: Any) -> None:
        self.fragments.add(node.name.value)


def _field_nodes(nodes: Any) -> list[FieldNode]:
    """graphql-core 3.2's field nodes, or 3.3's field details' nodes."""
    return [getattr(node, "node", node) for node in nodes]


def _missing(protection: Protection, header: str) -> str:
    where = f"its {protection.argument} argument or " if protection.argument else ""
    return f"This mutation field requires an idempotency key: {where}the {header} header."


def _refuse_a_shared_key(
    executor: Any,
    protection_of: Callable[[GraphQLField], Protection | None],
    root_type: GraphQLObjectType,
) -> None:
    """Before the first root field runs: refuse the document if two protected fields of it
    would take their key from one header (the key would protect only the first)."""
    try:
        request = request_of(executor.context_value)
    except ImproperlyConfigured:
        return  # each protected field reports it
    values = variable_values(executor)
    headers: dict[str, int] = {}
    for node in _root_fields(executor.operation.selection_set, fragment_definitions(executor)):
        definition = root_type.fields.get(node.name.value)
        protection = None if definition is None else protection_of(definition)
        if protection is None or argument_key(node, protection, values) is not None:
            continue
        header = protection.options.resolve(request).header
        if request.headers.get(header) is not None:
            headers[header] = headers.get(header, 0) + 1
    for header, count in headers.items():
        if count > 1:
            raise graphql_error(KeyShared(KeyShared.default_detail.format(header=header)))


def _root_fields(
    selections: SelectionSetNode, fragments: Mapping[str, FragmentDefinitionNode]
) -> Iterator[FieldNode]:
    """The root fields of an operation, one per response name (as graphql-core merges them).

    ``@skip`` and ``@include`` are not evaluated: a field either would be counts.
    """
    seen: set[str] = set()
    for node in _selected(selections, fragments):
        name = (node.alias or node.name).value
        if name not in seen:
            seen.add(name)
            yield node


def _selected(
    selections: SelectionSetNode, fragments: Mapping[str, FragmentDefinitionNode]
) -> Iterator[FieldNode]:
    for selection in selections.selections:
        if isinstance(selection, FieldNode):
            yield selection
        elif isinstance(selection, InlineFragmentNode):
            yield from _selected(selection.selection_set, fragments)
        elif isinstance(selection, FragmentSpreadNode):
            fragment = fragments.get(selection.name.value)
            if fragment is not None:
                yield from _selected(fragment.selection_set, fragments)


__all__ = [
    "ARGUMENT_HELP",
    "KEY_ARGUMENT",
    "KeyShared",
    "Protection",
    "entering",
    "execute_field",
    "graphql_error",
    "note_error",
]
