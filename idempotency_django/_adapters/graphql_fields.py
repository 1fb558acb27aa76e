"""Idempotent GraphQL mutation fields: the graphql-core part the Strawberry and Graphene
adapters share, a thin layer over :func:`idempotency_django._protocol.core.protect`.

A protected field is executed by the stack's execution context (graphql-core's
``execute_field``), so that what runs inside the claim's transaction is the field
*and its selection set*: the resolver, then every sub-field's resolver. What is
stored is the field's value exactly as it stands in the response's ``data`` (as
JSON), and a replay returns that value without running any resolver; the
response is the same, byte for byte, whatever the sub-fields would read today.

- The key is the field's own key argument (``idempotencyKey``) when the document
  gives one, else the request's ``Idempotency-Key`` header: the argument wins, so a
  document may carry two protected mutations, each with its own key. A request in
  which two protected fields would take one key (at any depth, in any operation of a
  batch, or one below a list) is refused as a whole; a batch is read as the stack's
  own view reads it (``Stack``), and each field checks its key again as it runs.
- A field is "the same call" by its place (the fields above it, with their arguments),
  its arguments as the operation resolves them (a variable or a literal of one value
  are one call), its directives and its selection set: see ``fingerprint()``.
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
import weakref
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.core.exceptions import ImproperlyConfigured
from django.core.files.uploadedfile import UploadedFile
from django.core.serializers.json import DjangoJSONEncoder
from django.http import HttpRequest, HttpResponse

from idempotency_django._protocol import core
from idempotency_django._protocol.fingerprint import arguments_digest, upload_digest
from idempotency_django._protocol.options import Options, Policy
from idempotency_django.exceptions import IdempotencyError, KeyMissing

try:
    import graphql
    from graphql import (
        DirectiveNode,
        DocumentNode,
        FieldNode,
        FragmentDefinitionNode,
        FragmentSpreadNode,
        GraphQLError,
        GraphQLField,
        GraphQLInterfaceType,
        GraphQLNamedType,
        GraphQLObjectType,
        GraphQLSchema,
        GraphQLUnionType,
        InlineFragmentNode,
        OperationType,
        SelectionSetNode,
        StringValueNode,
        VariableNode,
        get_named_type,
        is_list_type,
        is_wrapping_type,
        parse,
        validate,
        value_from_ast_untyped,
    )
    from graphql.execution.values import get_argument_values

    # What builds an operation's execution: graphql-core 3.2's ExecutionContext, 3.3's
    # Executor (Strawberry from 0.328 brings 3.3; graphene keeps 3.2).
    _Executor: Any = getattr(graphql, "Executor", None) or graphql.ExecutionContext
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
    argument_detail = (
        "Two protected mutation fields of this request would take the same key (one given "
        "twice in their idempotencyKey arguments, or one below a list): give each its own."
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
_STEPS = "_idempotency_graphql_steps"  # on the execution context: the fields above protected ones
_REACHES = "_idempotency_graphql_reaching"  # on the execution context: _REACHING's entry
_BATCH = "_idempotency_graphql_batch"  # on the request: its batch's shared-key verdict
_TAKEN = "_idempotency_graphql_taken"  # on the request: the keys its protected fields took


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
    stack: Stack,
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
        _refuse_a_shared_key(executor, stack, parent_type)
    protection_of = stack.protection_of
    field_nodes = _field_nodes(nodes)
    definition = parent_type.fields.get(field_nodes[0].name.value)
    if definition is None:
        return run(parent_type, source, nodes, path, *rest)
    if _leads_to_protection(executor, protection_of, definition):
        _steps(executor)[id(path)] = _Step(parent_type, definition, nodes[0])
    protection = protection_of(definition)
    if protection is None:
        return run(parent_type, source, nodes, path, *rest)
    field_run = _FieldRun(
        executor,
        protection,
        functools.partial(run, parent_type, source, nodes, path, *rest),
        _Running(tuple(path.as_list())),
        field_nodes,
        nodes[0],
        parent_type,
        definition,
        path,
    )
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return field_run.execute()
    return sync_to_async(field_run.execute)()


@dataclass(frozen=True)
class _Step:
    """A field on the way to a protected one (``account(id: 7)`` above ``pay``): its
    arguments are part of the protected field's identity."""

    parent_type: GraphQLObjectType
    definition: GraphQLField
    node: Any  # graphql-core 3.2's first field node, or 3.3's first field details

    def identity(self, executor: Any) -> list[Any]:
        arguments = _arguments(executor, self.definition, self.node, ())
        name = getattr(self.node, "node", self.node).name.value
        return [f"{self.parent_type.name}.{name}", arguments]


def _steps(executor: Any) -> dict[int, _Step]:
    """The fields above protected ones executed so far, by ``id()`` of their path: a path
    lives as long as its sub-fields' paths (their ``prev``), so a live one is never stale."""
    steps: dict[int, _Step] | None = getattr(executor, _STEPS, None)
    if steps is None:
        steps = {}
        setattr(executor, _STEPS, steps)
    return steps


# Per schema: the names of the types from which a protected field can be reached.
_REACHING: weakref.WeakKeyDictionary[GraphQLSchema, frozenset[str]] = weakref.WeakKeyDictionary()


def _leads_to_protection(
    executor: Any, protection_of: Callable[[GraphQLField], Protection | None], field: GraphQLField
) -> bool:
    """Whether a protected field may lie below ``field`` (only those fields are recorded)."""
    reaching: frozenset[str] | None = getattr(executor, _REACHES, None)
    if reaching is None:  # once per request, then an attribute: this runs for every field
        schema: GraphQLSchema = executor.schema
        reaching = _REACHING.get(schema)
        if reaching is None:
            reaching = _REACHING[schema] = _reaching(schema, protection_of)
        setattr(executor, _REACHES, reaching)
    return get_named_type(field.type).name in reaching


def _reaching(
    schema: GraphQLSchema, protection_of: Callable[[GraphQLField], Protection | None]
) -> frozenset[str]:
    reaching: set[str] = set()
    changed = True
    while changed:
        changed = False
        for named in schema.type_map.values():
            if named.name not in reaching and _reaches(schema, protection_of, named, reaching):
                reaching.add(named.name)
                changed = True
    return frozenset(reaching)


def _reaches(
    schema: GraphQLSchema,
    protection_of: Callable[[GraphQLField], Protection | None],
    named: GraphQLNamedType,
    reaching: set[str],
) -> bool:
    if isinstance(named, GraphQLUnionType):
        return any(member.name in reaching for member in named.types)
    if not isinstance(named, GraphQLObjectType | GraphQLInterfaceType):
        return False
    if isinstance(named, GraphQLInterfaceType):
        possible = schema.get_possible_types(named)
        if any(member.name in reaching for member in possible):
            return True
    return any(
        protection_of(definition) is not None or get_named_type(definition.type).name in reaching
        for definition in named.fields.values()
    )


@dataclass
class _FieldRun:
    """One protected field of one request: claim, execute (or replay), answer."""

    executor: Any
    protection: Protection
    run: Callable[[], Any]
    running: _Running
    nodes: list[FieldNode]
    first: Any  # graphql-core 3.2's first field node, or 3.3's first field details
    parent_type: GraphQLObjectType
    definition: GraphQLField
    path: Any
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
        self._take(taken_key(self.request, self.protection, self.nodes[0], values))
        digest = fingerprint(
            self.executor,
            self.parent_type,
            self.definition,
            self.first,
            self.nodes,
            self.protection,
            self.path,
        )
        return replace(
            policy,
            key=None if key is None else (lambda _request: key),
            fingerprint=lambda _request: digest,
        )

    def _take(self, key: tuple[str, str] | None) -> None:
        """Refuse a key another protected field of this request took: whatever the check
        before execution read, no two executed protected fields ever share one key."""
        assert self.request is not None
        taken: set[tuple[str, str]] = getattr(self.request, _TAKEN, set())
        if key in taken:
            raise key_shared(*key)
        if key is not None:
            taken.add(key)
            setattr(self.request, _TAKEN, taken)

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
    executor: Any,
    parent_type: GraphQLObjectType,
    definition: GraphQLField,
    first: Any,
    nodes: list[FieldNode],
    protection: Protection,
    path: Any,
) -> str:
    """What "the same call" is for a field: where it stands (the fields above it and their
    arguments: ``account(id: 7) { pay }`` is not ``account(id: 8) { pay }``), its arguments
    (but the key), its directives and its selection set, every value as the operation
    resolves it: ``amount: $a`` with ``a`` 5 is ``amount: 5``. Not the aliases of the field
    or of those above it: the stored value is the field's, whatever the response calls it."""
    values = dict(variable_values(executor))
    fragments = fragment_definitions(executor)
    skip = _key_names(definition, protection)
    used: set[str] = set()
    parts: list[Any] = [
        _ancestry(executor, path),
        f"{parent_type.name}.{nodes[0].name.value}",
        _arguments(executor, definition, first, skip),
    ]
    for node in nodes:
        parts.append(_directives(node.directives, values))
        if node.selection_set is not None:
            parts.append(_selection(node.selection_set, values, used))
    seen: dict[str, Any] = {}
    while pending := sorted(used - seen.keys()):
        for name in pending:
            fragment = fragments.get(name)
            seen[name] = None if fragment is None else _fragment(fragment, values, used)
    canonical = json.dumps([parts, seen], sort_keys=True, default=_plain)
    return arguments_digest(canonical)


def _ancestry(executor: Any, path: Any) -> list[Any]:
    """The fields above the one at ``path``, from the root: each its name and arguments, a
    list's item its index."""
    steps: dict[int, _Step] = getattr(executor, _STEPS, None) or {}
    found: list[Any] = []
    at = path.prev
    while at is not None:
        step = None if isinstance(at.key, int) else steps.get(id(at))
        found.append(at.key if step is None else step.identity(executor))
        at = at.prev
    return found[::-1]


def _key_names(definition: GraphQLField, protection: Protection) -> tuple[str, ...]:
    """The key argument's GraphQL name and the name its value is given under (Graphene's
    ``out_name``): the key is not part of the call."""
    if protection.argument is None:
        return ()
    argument = definition.args.get(protection.argument)
    out_name = None if argument is None else argument.out_name
    return (protection.argument,) if out_name is None else (protection.argument, out_name)


def _arguments(
    executor: Any, definition: GraphQLField, first: Any, skip: Iterable[str]
) -> dict[str, Any]:
    """A field's arguments as its resolver receives them: coerced, variables resolved,
    defaults filled in (the execution context's own coercion, already validated).

    ``first`` is graphql-core 3.2's first field node, or 3.3's first field details, which
    carry the values of a fragment's own variables."""
    node = getattr(first, "node", first)
    fragment_values = getattr(first, "fragment_variable_values", None)
    if fragment_values is None:
        values = get_argument_values(definition, node, executor.variable_values)
    else:  # graphql-core 3.3, a fragment with arguments
        values = get_argument_values(  # type: ignore[call-arg,unused-ignore]
            definition, node, executor.variable_values, fragment_values
        )
    for name in skip:
        values.pop(name, None)
    return values


def _directives(directives: Iterable[DirectiveNode] | None, values: dict[str, Any]) -> Any:
    return [
        [directive.name.value, _untyped(directive.arguments, values)]
        for directive in directives or ()
    ]


def _untyped(arguments: Iterable[Any] | None, values: dict[str, Any]) -> dict[str, Any]:
    """Arguments in a selection set, variables resolved (their types are not at hand: an
    enum's variable and its literal may still differ)."""
    return {
        argument.name.value: value_from_ast_untyped(argument.value, values)
        for argument in arguments or ()
    }


def _selection(selections: SelectionSetNode, values: dict[str, Any], used: set[str]) -> Any:
    """A selection set, canonical: names, aliases (they shape the stored value), arguments,
    directives and fragments, with every variable replaced by its value."""
    found: list[Any] = []
    for node in selections.selections:
        directives = _directives(node.directives, values)
        if isinstance(node, FieldNode):
            alias = None if node.alias is None else node.alias.value
            arguments = _untyped(node.arguments, values)
            below = None
            if node.selection_set is not None:
                below = _selection(node.selection_set, values, used)
            found.append(["field", alias, node.name.value, arguments, directives, below])
        elif isinstance(node, InlineFragmentNode):
            condition = None if node.type_condition is None else node.type_condition.name.value
            below = _selection(node.selection_set, values, used)
            found.append(["inline", condition, directives, below])
        elif isinstance(node, FragmentSpreadNode):
            used.add(node.name.value)
            found.append(["spread", node.name.value, directives])
    return found


def _fragment(fragment: FragmentDefinitionNode, values: dict[str, Any], used: set[str]) -> Any:
    return [
        fragment.type_condition.name.value,
        _directives(fragment.directives, values),
        _selection(fragment.selection_set, values, used),
    ]


def _plain(value: object) -> object:
    """A coerced value that is no JSON value (an enum, an input object instance, a Decimal,
    an upload: its name, type and content, as a form's file counts)."""
    if isinstance(value, Enum):
        return value.name
    if isinstance(value, UploadedFile):
        return {"upload": upload_digest(value)}
    attributes = getattr(value, "__dict__", None)
    return attributes if attributes is not None else str(value)


def _field_nodes(nodes: Any) -> list[FieldNode]:
    """graphql-core 3.2's field nodes, or 3.3's field details' nodes."""
    return [getattr(node, "node", node) for node in nodes]


def _missing(protection: Protection, header: str) -> str:
    where = f"its {protection.argument} argument or " if protection.argument else ""
    return f"This mutation field requires an idempotency key: {where}the {header} header."


@dataclass(frozen=True)
class Sent:
    """One GraphQL request of a batch, as the stack's view parsed it (its own parser's
    answer: graphene-django's ``get_graphql_params``, Strawberry's ``parse_http_body``)."""

    query: object
    variables: object
    operation_name: object


def _as_sent(_document: DocumentNode, name: object) -> object:
    return name


@dataclass(frozen=True)
class Stack:
    """What a stack's adapter tells the shared code: a field's protection; the batch a
    request carries as the stack's own view reads it (``None``: not a batch); and the name
    under which the stack has graphql-core run a document sent with a name (or none)."""

    protection_of: Callable[[GraphQLField], Protection | None]
    batch_of: Callable[[HttpRequest], Sequence[Sent] | None]
    operation_name: Callable[[DocumentNode, object], object] = _as_sent


def routed_view(request: HttpRequest, kind: type | tuple[type, ...]) -> Any:
    """The class-based view (a ``kind``) the request was routed to, made as Django makes it
    for each request, or ``None`` (not routed by the URLconf, or another view)."""
    match = getattr(request, "resolver_match", None)
    function = getattr(match, "func", None)
    view_class = getattr(function, "view_class", None)
    if match is None or not (isinstance(view_class, type) and issubclass(view_class, kind)):
        return None
    view: Any = view_class(**getattr(function, "view_initkwargs", {}))
    view.setup(request, *match.args, **match.kwargs)
    return view


@dataclass(frozen=True)
class _Operation:
    """One operation of a request, as the shared-key check reads it."""

    root_type: GraphQLObjectType | None
    selection_set: SelectionSetNode
    fragments: Mapping[str, FragmentDefinitionNode]
    variables: Mapping[str, Any]


@dataclass(frozen=True)
class Planned:
    """A protected field the shared-key check expects to run, and the key it would take:
    ``("header", name)`` or ``("argument", value)``; ``None`` when it has none."""

    node: FieldNode
    variables: Mapping[str, Any]
    key: tuple[str, str] | None
    many: bool  # below a list: it runs once per item


def _refuse_a_shared_key(executor: Any, stack: Stack, root_type: GraphQLObjectType) -> None:
    """Before the first root field runs: refuse the document if two protected fields of it
    (at any depth), or of the batch it came in, would take one key (the key would protect
    only the first); or if one under a list would (it runs per item)."""
    try:
        request = request_of(executor.context_value)
    except ImproperlyConfigured:
        return  # each protected field reports it
    verdict: KeyShared | None
    if hasattr(request, _BATCH):  # another operation of this batch decided for all of them
        verdict = getattr(request, _BATCH)
    else:
        batch = _batch(request, stack, executor.schema)
        operations = batch if batch is not None else [_executed(executor, root_type)]
        verdict = _shared(plan(executor.schema, stack, request, operations))
        if batch is not None:
            setattr(request, _BATCH, verdict)
    if verdict is not None:
        raise graphql_error(verdict)


def _executed(executor: Any, root_type: GraphQLObjectType) -> _Operation:
    """The operation ``executor`` runs: the stack's own document, as graphql-core chose it."""
    return _Operation(
        root_type,
        executor.operation.selection_set,
        fragment_definitions(executor),
        variable_values(executor),
    )


def plan(
    schema: GraphQLSchema, stack: Stack, request: HttpRequest, operations: Iterable[_Operation]
) -> list[Planned]:
    """The protected fields of ``operations`` at every depth, each with its key."""
    planned: list[Planned] = []
    for operation in operations:
        if operation.root_type is None:
            continue
        walk = _Walk(schema, stack.protection_of, request, operation, planned)
        walk.fields(operation.root_type, [operation.selection_set], many=False)
    return planned


def _shared(planned: Iterable[Planned]) -> KeyShared | None:
    """The refusal when two planned fields (or one below a list) would take one key."""
    counts: Counter[tuple[str, str]] = Counter()
    for call in planned:
        if call.key is not None:
            counts[call.key] += 2 if call.many else 1
    shared = next((key for key, count in counts.items() if count > 1), None)
    return None if shared is None else key_shared(*shared)


def key_shared(source: str, name: str) -> KeyShared:
    """The refusal of a key taken twice in one request: from the ``name`` header, or given
    twice in key arguments."""
    if source == "header":
        return KeyShared(KeyShared.default_detail.format(header=name))
    return KeyShared(KeyShared.argument_detail)


@dataclass
class _Walk:
    """Lists the protected fields of one operation, at every depth.

    Fields are merged by response name, as graphql-core merges them; ``@skip`` and
    ``@include`` are not evaluated: a field either would be counts.
    """

    schema: GraphQLSchema
    protection_of: Callable[[GraphQLField], Protection | None]
    request: HttpRequest
    operation: _Operation
    planned: list[Planned]

    def fields(
        self, parent: GraphQLNamedType, selection_sets: list[SelectionSetNode], many: bool
    ) -> None:
        merged: dict[str, list[tuple[FieldNode, GraphQLNamedType]]] = {}
        for selections in selection_sets:
            for node, on in _selected(selections, self.operation.fragments, parent, self.schema):
                merged.setdefault((node.alias or node.name).value, []).append((node, on))
        for group in merged.values():
            self.field(group, many)

    def field(self, group: list[tuple[FieldNode, GraphQLNamedType]], many: bool) -> None:
        node, on = group[0]
        fields = getattr(on, "fields", None) or {}
        definition = fields.get(node.name.value)
        if definition is None:
            return
        protection = self.protection_of(definition)
        if protection is not None:
            key = taken_key(self.request, protection, node, self.operation.variables)
            self.planned.append(Planned(node, self.operation.variables, key, many))
        below = [n.selection_set for n, _ in group if n.selection_set is not None]
        if below:
            self.fields(get_named_type(definition.type), below, many or _is_list(definition))


def taken_key(
    request: HttpRequest, protection: Protection, node: FieldNode, variables: Mapping[str, Any]
) -> tuple[str, str] | None:
    """The key a protected field takes: its key argument's, else the header's, else none."""
    key = argument_key(node, protection, variables)
    if key is not None:
        return ("argument", str(key))
    header = protection.options.resolve(request).header
    return None if request.headers.get(header) is None else ("header", header)


def _is_list(definition: GraphQLField) -> bool:
    wrapped: Any = definition.type
    while is_wrapping_type(wrapped):
        if is_list_type(wrapped):
            return True
        wrapped = wrapped.of_type
    return False


def _selected(
    selections: SelectionSetNode,
    fragments: Mapping[str, FragmentDefinitionNode],
    on: GraphQLNamedType,
    schema: GraphQLSchema,
) -> Iterator[tuple[FieldNode, GraphQLNamedType]]:
    """The fields of a selection set, through its fragments, each with the type it is on."""
    for selection in selections.selections:
        if isinstance(selection, FieldNode):
            yield selection, on
        elif isinstance(selection, InlineFragmentNode):
            condition = selection.type_condition
            inner = on if condition is None else schema.get_type(condition.name.value) or on
            yield from _selected(selection.selection_set, fragments, inner, schema)
        elif isinstance(selection, FragmentSpreadNode):
            fragment = fragments.get(selection.name.value)
            if fragment is not None:
                inner = schema.get_type(fragment.type_condition.name.value) or on
                yield from _selected(fragment.selection_set, fragments, inner, schema)


_ROOTS = {
    OperationType.QUERY: "query_type",
    OperationType.MUTATION: "mutation_type",
    OperationType.SUBSCRIPTION: "subscription_type",
}


def _batch(request: HttpRequest, stack: Stack, schema: GraphQLSchema) -> list[_Operation] | None:
    """The operations of a batched request as the stack runs them, or ``None``: the stack's
    view reads the batch (its items, their query, variables and operation name), and
    graphql-core chooses each item's operation and coerces its variables, as it does to run
    it. An item the stack answers with an error runs nothing and is left out."""
    sent = stack.batch_of(request)
    if sent is None:
        return None
    operations: list[_Operation] = []
    for item in sent:
        operation = _operation(item, stack, schema)
        if operation is not None:
            operations.append(operation)
    return operations


def _operation(item: Sent, stack: Stack, schema: GraphQLSchema) -> _Operation | None:
    """One item of a batch as graphql-core runs it, or ``None`` if it runs nothing (its own
    execution reports why)."""
    if not isinstance(item.query, str):
        return None
    try:
        document = parse(item.query)
    except GraphQLError:
        return None
    if validate(schema, document):
        return None
    variables: Any = item.variables  # as the stack passes them on, whatever their type
    name: Any = stack.operation_name(document, item.operation_name)
    try:
        built = _Executor.build(schema, document, None, None, variables, name)
    except Exception:  # noqa: BLE001  (variables of no JSON object shape: the stack fails too)
        return None
    if isinstance(built, list):  # no such operation, or its variables do not coerce
        return None
    return _Operation(
        getattr(schema, _ROOTS[built.operation.operation]),
        built.operation.selection_set,
        fragment_definitions(built),
        variable_values(built),
    )


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
