"""drf-spectacular support: protected operations document their key header and errors.

Imported by ``AppConfig.ready()`` only when drf-spectacular is installed; importing
it registers :class:`IdempotentViewExtension`, which applies to every view using
:class:`~idempotency_django.rest_framework.IdempotentMixin` whatever its schema class.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from drf_spectacular.extensions import OpenApiViewExtension
from drf_spectacular.plumbing import ComponentRegistry, ResolvedComponent
from rest_framework.views import APIView

from idempotency_django._adapters import openapi
from idempotency_django._conf import conf
from idempotency_django._protocol.responses import PROBLEM_CONTENT_TYPE, REPLAYED_HEADER
from idempotency_django.rest_framework import IdempotentMixin

Operation = dict[str, Any]

PROBLEM_COMPONENT = "IdempotencyProblem"
_REPLAYED = {
    "schema": {"type": "string", "enum": ["true"]},
    "description": "Present when this is the stored answer to an earlier request with the same key.",
}


class IdempotentViewExtension(OpenApiViewExtension):  # type: ignore[no-untyped-call]
    """Swaps a protected view for a subclass whose schema documents idempotency."""

    target_class = IdempotentMixin
    match_subclasses = True
    # Only one view extension applies per view: a project's own one wins over ours.
    priority = -1

    def view_replacement(self) -> type[APIView]:
        return _documented_view(self.target)


@functools.cache
def _documented_view(view: type[APIView]) -> type[APIView]:
    inner = inspect.getattr_static(view, "schema")
    attrs = {"schema": _DocumentingSchema(inner), "__module__": view.__module__}
    return type(view.__name__, (view,), attrs)


class _DocumentingSchema:
    """Stands in for the view's ``schema`` descriptor, so that whatever schema the view
    ends up with (``DEFAULT_SCHEMA_CLASS``, its own, one from ``@extend_schema``)
    gets idempotency added to the operations it builds."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __get__(self, instance: APIView | None, owner: type[APIView]) -> Any:
        schema = self.inner.__get__(instance, owner)
        _wrap_get_operation(schema)
        return schema

    def __set__(self, instance: APIView, value: Any) -> None:
        self.inner.__set__(instance, value)


def _wrap_get_operation(schema: Any) -> None:
    if getattr(schema, "_idempotency_documented", False):
        return
    get_operation = schema.get_operation

    def documented(
        path: str, path_regex: str, path_prefix: str, method: str, registry: ComponentRegistry
    ) -> Operation | None:
        operation: Operation | None = get_operation(path, path_regex, path_prefix, method, registry)
        if operation is not None:
            document_operation(operation, schema.view, method, registry)
        return operation

    schema.get_operation = documented
    schema._idempotency_documented = True


def document_operation(
    operation: Operation, view: Any, method: str, registry: ComponentRegistry
) -> None:
    """Add the key header and the 400/409/422/503 answers to a protected operation."""
    if not isinstance(view, IdempotentMixin):
        return
    options = type(view).get_idempotency_options()
    if method.upper() not in options.methods:
        return
    # Not options.resolve(): with no request, a database chosen per request is unknown.
    header = options.header or conf.HEADER
    required = conf.REQUIRED if options.required is None else options.required
    # An overridden get_idempotency_key() may read the key from elsewhere (a body field).
    if type(view).get_idempotency_key is IdempotentMixin.get_idempotency_key:
        _add_header(operation, header, required)
    _add_responses(operation, registry)


def _add_header(operation: Operation, name: str, required: bool) -> None:
    parameters = operation.setdefault("parameters", [])
    if any(p.get("in") == "header" and p.get("name") == name for p in parameters):
        return
    parameters.append(openapi.key_parameter(name, required))


def _add_responses(operation: Operation, registry: ComponentRegistry) -> None:
    responses = operation.setdefault("responses", {})
    for code, response in responses.items():
        if code.startswith("2"):
            response.setdefault("headers", {}).setdefault(REPLAYED_HEADER, _REPLAYED)
    for status, description in openapi.ERRORS.items():
        code = str(status)
        response = responses.setdefault(code, {"description": description})
        if conf.ERROR_FORMAT != "drf":
            # Under "drf" the project's EXCEPTION_HANDLER shapes the body.
            content = response.setdefault("content", {})
            content.setdefault(PROBLEM_CONTENT_TYPE, {"schema": _problem_ref(registry)})
        if status in openapi.RETRY_AFTER_CODES:
            response.setdefault("headers", {}).setdefault("Retry-After", openapi.RETRY_AFTER)


def _problem_ref(registry: ComponentRegistry) -> dict[str, str]:
    component = ResolvedComponent(  # type: ignore[no-untyped-call]
        name=PROBLEM_COMPONENT,
        type=ResolvedComponent.SCHEMA,
        schema=openapi.PROBLEM_SCHEMA,
        object=PROBLEM_COMPONENT,
    )
    registry.register_on_missing(component)
    return component.ref
