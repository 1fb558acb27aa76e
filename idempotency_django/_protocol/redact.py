"""Redaction: what of an answer may be stored for replays (``redact=``, ``IDEMPOTENCY_REDACT``).

The first caller always gets the view's full answer; only the stored copy (what
every replay sends) is redacted, and a replay of a redacted answer carries
``Idempotent-Redacted: true`` so that a client knows the token it expected is
not in it. Two forms:

- a callable taking the final ``HttpResponse`` and returning the response to store.
  It is handed a copy: whether it returns a new response or edits the one it got,
  the caller's answer is untouched and what it returns is what is stored;
- a list of JSON field paths (``["token", "card.secret"]``): each named field of a
  JSON body is replaced by :data:`MARKER`; a list on the way is walked item by item.
  A body they cannot read (not JSON, or not parsable: a page of DRF's browsable API
  negotiated by ``Accept: text/html``) fails closed: none of it is stored, and a
  replay gets the status and headers with an empty body (no ``Content-Type``),
  marked ``Idempotent-Redacted: true``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sequence
from typing import Any

from django.http import HttpResponse
from django.http.response import ResponseHeaders

from idempotency_django._protocol.responses import StoredResponse, require_plain

REDACTED_HEADER = "Idempotent-Redacted"
MARKER = "[redacted]"
Redactor = Callable[[HttpResponse], HttpResponse]


def redactor(value: Any) -> Redactor | None:
    """``value`` as a redactor: ``None``, a callable, or JSON field paths; ``TypeError`` else."""
    if value is None or callable(value):
        return value  # type: ignore[no-any-return]
    if isinstance(value, list | tuple) and value and all(_is_path(p) for p in value):
        return FieldPaths(value)
    raise TypeError(
        f"redact= takes a callable (response -> response to store) or a non-empty list of "
        f'JSON field paths such as ["token", "card.secret"], got {value!r}'
    )


def _is_path(path: object) -> bool:
    return isinstance(path, str) and all(path.split("."))


class FieldPaths:
    """The declarative form: named fields of a JSON body replaced by :data:`MARKER`."""

    def __init__(self, paths: Sequence[str]) -> None:
        self.paths = [tuple(path.split(".")) for path in paths]

    def __call__(self, response: HttpResponse) -> HttpResponse:
        if not response.content:
            return response  # nothing a path could name
        if "json" not in response.get("Content-Type", ""):
            return _without_body(response)
        try:
            data = json.loads(response.content)
        except ValueError:
            return _without_body(response)
        blanked = [_blank(data, path) for path in self.paths]  # every path, no short cut
        if not any(blanked):
            return response
        stored = HttpResponse(
            json.dumps(data).encode(), status=response.status_code, reason=response.reason_phrase
        )
        for name, value in response.items():
            stored[name] = value
        return stored

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FieldPaths) and other.paths == self.paths

    def __hash__(self) -> int:
        return hash(tuple(self.paths))


def _without_body(response: HttpResponse) -> HttpResponse:
    """Fail closed: a body the paths cannot be applied to is not stored at all."""
    stored = HttpResponse(b"", status=response.status_code, reason=response.reason_phrase)
    del stored["Content-Type"]
    for name, value in response.items():
        if name.lower() != "content-type":
            stored[name] = value
    return stored


def _blank(data: Any, path: tuple[str, ...]) -> bool:
    """Replace the field at ``path`` in ``data`` (in place); whether any was there."""
    if isinstance(data, list):
        return sum(_blank(item, path) for item in data) > 0
    if not isinstance(data, dict) or path[0] not in data:
        return False
    if len(path) == 1:
        data[path[0]] = MARKER
        return True
    return _blank(data[path[0]], path[1:])


def stored_answer(response: HttpResponse, redact: Redactor | None) -> StoredResponse:
    """What is stored for replays of ``response``: redacted (and marked so) when it changed."""
    full = StoredResponse.from_response(response)
    if redact is None:
        return full
    stored = StoredResponse.from_response(require_plain(redact(_copy(response))))
    if stored == full:
        return full
    return StoredResponse(
        stored.status, [*stored.headers, (REDACTED_HEADER, "true")], stored.body, stored.reason
    )


def _copy(response: HttpResponse) -> HttpResponse:
    """A copy the redactor may edit: its content, headers and cookies are its own."""
    clone = copy.copy(response)
    clone.headers = ResponseHeaders(response.headers)
    clone.cookies = copy.deepcopy(response.cookies)
    clone._resource_closers = []  # type: ignore[attr-defined]
    clone.content = response.content
    return clone


def is_redacted(answer: StoredResponse) -> bool:
    return any(name == REDACTED_HEADER for name, _ in answer.headers)


__all__ = ["MARKER", "REDACTED_HEADER", "FieldPaths", "is_redacted", "redactor", "stored_answer"]
