"""Turning errors into problem+json, and stored answers back into responses."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.client import responses as STANDARD_PHRASES
from typing import Any

from django.forms import BaseForm
from django.forms.formsets import BaseFormSet
from django.http import HttpRequest, HttpResponse, HttpResponseBase

from idempotency_django._protocol import refusal_pages
from idempotency_django.exceptions import IdempotencyError

PROBLEM_CONTENT_TYPE = "application/problem+json"
REPLAYED_HEADER = "Idempotent-Replayed"

# Never replayed: per-connection, per-response or credential-bearing headers.
_NOT_STORED = frozenset(
    {
        "set-cookie",
        "date",
        "connection",
        "keep-alive",
        "transfer-encoding",
        "content-length",
        "server",
        "proxy-authenticate",
        "upgrade",
        "trailer",
        "te",
    }
)


@dataclass(frozen=True)
class StoredResponse:
    """A final answer as recorded: status, replayable headers and the exact body bytes.

    ``reason`` is the reason phrase only when the view chose its own
    (``HttpResponse(status=402, reason="Card Declined")``); ``""`` means the standard one.
    """

    status: int
    headers: list[tuple[str, str]]
    body: bytes
    reason: str = ""
    # The sealed form it was read from (``seal.Sealed.blob``), for the replay cache to reuse.
    sealed: bytes = field(default=b"", compare=False, repr=False)

    @classmethod
    def from_response(cls, response: HttpResponse) -> StoredResponse:
        headers = [(k, v) for k, v in response.items() if k.lower() not in _NOT_STORED]
        return cls(response.status_code, headers, bytes(response.content), _own_reason(response))

    def to_response(self) -> HttpResponse:
        response = HttpResponse(self.body, status=self.status, reason=self.reason or None)
        if not any(name.lower() == "content-type" for name, _ in self.headers):
            del response["Content-Type"]  # stored without one (a 204): replayed without one
        for name, value in self.headers:
            response[name] = value
        response[REPLAYED_HEADER] = "true"
        return response


def _own_reason(response: HttpResponseBase) -> str:
    # Django's own default, so that "" means "whatever Django would say" on replay too.
    standard = STANDARD_PHRASES.get(response.status_code, "Unknown Status Code")
    return "" if response.reason_phrase == standard else response.reason_phrase


def problem_response(error: IdempotencyError, request: HttpRequest | None = None) -> HttpResponse:
    """RFC 9457 problem details for a client error; given the ``request`` of a person's
    browser (its ``Accept`` prefers HTML), a 400/409/422 is a page instead, same status."""
    if refusal_pages.wants_page(error, request):
        assert request is not None
        response = refusal_pages.refusal_page(error, request)
        for name, value in error.headers().items():
            response[name] = value
        return response
    payload = {
        "type": error.type_uri,
        "title": error.title,
        "status": error.status,
        "detail": error.detail,
    }
    response = HttpResponse(
        json.dumps(payload), status=error.status, content_type=PROBLEM_CONTENT_TYPE
    )
    for name, value in error.headers().items():
        response[name] = value
    return response


def is_final(status: int) -> bool:
    """Whether an answer is stored and replayed: not 5xx, not a transient 4xx."""
    return status < 500 and status not in TRANSIENT_4XX


TRANSIENT_4XX = frozenset({408, 409, 425, 429})


def shows_form_errors(response: HttpResponseBase) -> bool:
    """Whether ``response`` is a form page shown again with its errors: a template response
    whose context holds a bound form or formset that did not validate (a generic editing
    view's ``form_invalid``, the admin's add and change pages, its ``list_editable``).
    Nothing was done, so it is no answer to its key: never stored, the key stays free."""
    context = getattr(response, "context_data", None)
    if not isinstance(context, dict):
        return False
    return any(form.is_bound and not form.is_valid() for form in _forms_in(context))


def _forms_in(context: dict[str, object]) -> Iterator[BaseForm | BaseFormSet[Any]]:
    """The forms of a context, and those the admin wraps (``adminform.form``,
    ``inline_admin_formsets[i].formset``, ``cl.formset``): read from the instances'
    own attributes, so that no property or lazy object is evaluated."""
    for value in context.values():
        for item in value if isinstance(value, list | tuple) else (value,):
            own = getattr(item, "__dict__", {})
            for candidate in (item, own.get("form"), own.get("formset")):
                if isinstance(candidate, BaseForm | BaseFormSet):
                    yield candidate


def require_plain(response: HttpResponseBase) -> HttpResponse:
    """The response as an ``HttpResponse`` with its content; streaming can't be stored."""
    if not isinstance(response, HttpResponse):
        raise TypeError(
            f"An idempotent view must return a non-streaming HttpResponse, got {type(response).__name__}; "
            "its body has to be stored to be replayed. A view IdempotencyMiddleware protects "
            "(one with no protection of its own) opts out with @idempotency_exempt."
        )
    render = getattr(response, "render", None)
    if callable(render):
        render()
    return response
