"""Idempotent updates without a key, or beside one: ``If-Match`` preconditions and
operations applied to a row once (the seeds' "conditional updates with version
numbers, not relative increments"; docs/conditional.rst).

Under :func:`~idempotency_django.idempotent`, a view (and :func:`if_match` below
it) runs inside the claim's transaction, so reading the row ``select_for_update()``
there makes the check and the write one step: a concurrent update of the same row
waits for the lock, then sees the new version and is refused with 412.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable
from typing import Any, TypeVar

from django.db import models
from django.http import HttpRequest, HttpResponse

from idempotency_django._protocol.responses import problem_response
from idempotency_django.exceptions import (
    IdempotencyError,
    PreconditionFailed,
    PreconditionRequired,
)

ViewFunc = TypeVar("ViewFunc", bound=Callable[..., HttpResponse])
EtagOf = Callable[..., object]

_OPAQUE = re.compile(r"[\x21\x23-\x7e]*")  # etagc (RFC 9110 §8.8.3), obs-text left out
# One entity-tag of an If-Match list: optional W/, then a quoted opaque tag.
_ENTITY_TAG = re.compile(r'\s*(W/)?("[\x21\x23-\x7e]*")\s*(?:,|$)')


def etag(version: object) -> str:
    """A strong ETag for ``version`` (a version number, a timestamp, a hash): ``"7"``.

    A value that an ETag can't hold as it is (a quote, a space, non-ASCII) is
    hashed, so two versions never share an ETag.
    """
    text = str(version)
    if _OPAQUE.fullmatch(text) is None:
        text = hashlib.sha256(text.encode()).hexdigest()[:32]
    return f'"{text}"'


def if_match_list(header: str) -> list[tuple[bool, str]] | None:
    """``If-Match`` as ``[(weak, tag), …]``; ``[]`` for ``*``; ``None`` when malformed."""
    if header.strip() == "*":
        return []
    found, position = [], 0
    while position < len(header):
        match = _ENTITY_TAG.match(header, position)
        if match is None or match.end() == position:
            return None
        found.append((match[1] is not None, match[2]))
        position = match.end()
    return found or None


def precondition_error(
    request: HttpRequest, current: str | None, *, required: bool = True
) -> IdempotencyError | None:
    """Why ``request``'s ``If-Match`` refuses an update of a resource whose ETag is
    ``current`` (``None``: it doesn't exist), or ``None`` when the update may go on.

    Strong comparison (RFC 9110 §13.1.1): a weak ETag never matches; ``*`` matches
    any existing resource. No ``If-Match`` refuses with 428 when ``required``.
    """
    header = request.headers.get("If-Match")
    if header is None:
        return PreconditionRequired() if required else None
    tags = if_match_list(header)
    if tags is None:
        return PreconditionFailed("The If-Match header is not a list of entity tags.")
    if current is None:
        return PreconditionFailed("The resource does not exist.")
    if tags == [] or any(not weak and tag == current for weak, tag in tags):
        return None
    return PreconditionFailed()


def check_if_match(
    request: HttpRequest, current: str | None, *, required: bool = True
) -> HttpResponse | None:
    """The 412/428 problem+json answer to return, or ``None`` when the update may go on.

    ``current`` is read in the transaction that writes: under ``@idempotent``, with
    ``select_for_update()``. A refusal a protected view returns is a final answer:
    stored, and replayed to a retry with the same key.
    """
    error = precondition_error(request, current, required=required)
    return None if error is None else problem_response(error)


def if_match(etag_of: EtagOf, *, required: bool = True) -> Callable[[ViewFunc], ViewFunc]:
    """A view decorator, placed under ``@idempotent``: the view runs only when ``If-Match``
    names the current ETag, ``etag_of(request, *args, **kwargs)`` (a version, wrapped by
    :func:`etag`, or an ETag already quoted; ``None`` for a missing resource).

    ``etag_of`` should lock the row it reads (``select_for_update()``), so that no
    other update of it commits between the check and the view's own write.
    """

    def decorate(view: ViewFunc) -> ViewFunc:
        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            version = etag_of(request, *args, **kwargs)
            current = None if version is None else _as_etag(version)
            refused = check_if_match(request, current, required=required)
            return refused if refused is not None else view(request, *args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


def version_of(
    rows: type[models.Model] | models.QuerySet[Any],
    field: str = "version",
    *,
    kwarg: str = "pk",
    lookup: str = "pk",
) -> EtagOf:
    """An ``etag_of`` for :func:`if_match` reading a version field: ``field`` of the row
    whose ``lookup`` is the view's ``kwarg`` URL argument, locked ``FOR UPDATE``
    (``None``, so 412, when there is no such row).

    ``@if_match(version_of(Account))`` for ``path("accounts/<int:pk>/", ...)``.
    """
    queryset = rows if isinstance(rows, models.QuerySet) else rows._default_manager.all()

    def read(request: HttpRequest, *args: Any, **kwargs: Any) -> object:
        row = queryset.select_for_update().filter(**{lookup: kwargs[kwarg]})
        return row.values_list(field, flat=True).first()

    return read


def _as_etag(version: object) -> str:
    text = str(version)
    quoted = len(text) >= 2 and text[0] == text[-1] == '"'
    return text if quoted and _OPAQUE.fullmatch(text[1:-1]) else etag(version)


def apply_once(
    target: models.Model | models.QuerySet[Any],
    operation_id: str,
    *,
    field: str = "last_operation_id",
    **updates: Any,
) -> bool:
    """Apply ``updates`` to ``target`` unless ``operation_id`` was the last applied there.

    One statement, ``UPDATE … SET <updates>, <field> = %s WHERE <target> AND <field>
    IS DISTINCT FROM %s``, so a redelivered operation (a message, a webhook, a retried
    task with no key) changes nothing the second time. Whether it applied (any row).
    Only the *last* operation is remembered: an older one arriving after a newer one
    applies again; when that can happen, give the operation a key instead.
    """
    if isinstance(target, models.Model):
        manager = type(target)._default_manager
        target = manager.using(target._state.db).filter(pk=target.pk)
    # exclude(field=x) is "NOT (field = x AND field IS NOT NULL)": rows never touched
    # (NULL) are included, as IS DISTINCT FROM includes them.
    changed = target.exclude(**{field: operation_id}).update(**{field: operation_id}, **updates)
    return changed > 0


__all__ = ["apply_once", "check_if_match", "etag", "if_match", "version_of"]
