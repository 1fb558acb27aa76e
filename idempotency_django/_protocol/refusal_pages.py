"""Refusals a person reads: the HTML page a browser gets instead of problem+json.

A refusal (400, 409, 422) to a request whose ``Accept`` prefers ``text/html`` (a
browser's form post) is this page, with the same status; every other client (an
API client, ``fetch``, htmx, which send ``*/*``) keeps problem+json.
``responses.problem_response`` decides; the page is the template
``idempotency_django/refusal.html``, which a project may override.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.template import Context, Engine, TemplateDoesNotExist, loader

from idempotency_django.exceptions import IdempotencyError

TEMPLATE = "idempotency_django/refusal.html"
HTML_STATUSES = frozenset({400, 409, 422})
_PROBLEM_TYPES = ["application/problem+json", "application/json", "text/html"]
# Without APP_DIRS (an API-only project, say), the page is found here all the same.
_OWN_TEMPLATES = Path(__file__).parent.parent / "templates"

# What a person is told, and can do, per refusal: its code (``IdempotencyError.code``).
_WHAT_HAPPENED = {
    "key-reused": (
        "This form was already sent",
        "This form was sent before with other contents (after the back button, say), so "
        "nothing was done this time: what the first submission did stands. To send new "
        "contents, open the form afresh.",
    ),
    "in-progress": (
        "This form is still being sent",
        "The same form was sent a moment ago and is still being processed. Wait a few "
        "seconds, then reload this page to see its outcome.",
    ),
}
_DEFAULT = (
    "This form could not be sent",
    "The form's submission could not be checked for duplicates, so nothing was done. "
    "Open the form afresh and send it again.",
)


def prefers_html(request: HttpRequest) -> bool:
    """Whether ``Accept`` ranks ``text/html`` above problem+json (``*/*`` does not)."""
    return request.get_preferred_type(_PROBLEM_TYPES) == "text/html"


def wants_page(error: IdempotencyError, request: HttpRequest | None) -> bool:
    return request is not None and error.status in HTML_STATUSES and prefers_html(request)


def refusal_page(error: IdempotencyError, request: HttpRequest) -> HttpResponse:
    """The page for ``error``, with its status; never cached (it is about one submission)."""
    heading, explanation = _WHAT_HAPPENED.get(error.code, _DEFAULT)
    context = {
        "status": error.status,
        "code": error.code,
        "title": error.title,
        "detail": error.detail,
        "heading": heading,
        "explanation": explanation,
        "form_url": request.path,  # a GET of the form's page renders it with a new key
        "back_url": _same_site_referer(request),
    }
    response = HttpResponse(_render(context, request), status=error.status)
    response["Cache-Control"] = "no-store"
    return response


def _render(context: dict[str, Any], request: HttpRequest) -> str:
    try:
        return loader.render_to_string(TEMPLATE, context, request)
    except TemplateDoesNotExist:
        engine = Engine(dirs=[str(_OWN_TEMPLATES)], autoescape=True)
        return engine.get_template(TEMPLATE).render(Context(context, autoescape=True))


def _same_site_referer(request: HttpRequest) -> str:
    """The page the form was on, when it was this site's (never an outside address)."""
    referer = request.headers.get("Referer", "")
    host = request.get_host()
    for scheme in ("https://", "http://"):
        if referer.startswith(f"{scheme}{host}/"):
            return referer
    return ""
