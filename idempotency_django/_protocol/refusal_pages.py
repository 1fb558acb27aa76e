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

from idempotency_django._protocol.keys import FORM_TYPES
from idempotency_django.exceptions import IdempotencyError

TEMPLATE = "idempotency_django/refusal.html"
HTML_STATUSES = frozenset({400, 409, 422})
_PROBLEM_TYPES = ["application/problem+json", "application/json", "text/html"]
# Without APP_DIRS (an API-only project, say), the page is found here all the same.
_OWN_TEMPLATES = Path(__file__).parent.parent / "templates"

# What a person is told per refusal (``IdempotencyError.code``): about the form they sent
# (a browser's form post), or about the request (an API endpoint asked for HTML).
_FORM = {
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
    # Opening the form again would not help: its page lacks the key (the developer's fix).
    "key-missing": (
        "This form can't be sent safely",
        "The form carries no idempotency_key field, so nothing was done. Its page's "
        "template must render {% idempotency_key_field %} inside the <form> (after "
        "{% load idempotency %}): until it does, sending the form again fails the same way. "
        "Tell the site's owner.",
    ),
}
_FORM_DEFAULT = (
    "This form could not be sent",
    "The form's submission could not be checked for duplicates, so nothing was done. "
    "Open the form afresh and send it again.",
)
_REQUEST = {
    "key-reused": (
        "This request was already sent",
        "Its idempotency key was sent before with another request, so nothing was done this "
        "time: what the first request did stands. A new request needs a new key.",
    ),
    "in-progress": (
        "This request is still being processed",
        "A request with the same idempotency key is still running. Send it again in a few "
        "seconds to get its outcome.",
    ),
}
_REQUEST_DEFAULT = (
    "This request could not be accepted",
    "Its idempotency key is missing or unreadable, so nothing was done.",
)
# The codes after which the form's page, opened again, renders what is needed: a new key.
_FRESH_FORM_HELPS = frozenset({"key-reused", "in-progress", "key-malformed"})


def prefers_html(request: HttpRequest) -> bool:
    """Whether ``Accept`` ranks ``text/html`` above problem+json (``*/*`` does not)."""
    return request.get_preferred_type(_PROBLEM_TYPES) == "text/html"


def wants_page(error: IdempotencyError, request: HttpRequest | None) -> bool:
    return request is not None and error.status in HTML_STATUSES and prefers_html(request)


def refusal_page(error: IdempotencyError, request: HttpRequest) -> HttpResponse:
    """The page for ``error``, with its status; never cached (it is about one submission).

    Its words fit what was refused: a form a browser posted, or another request (an API
    endpoint asked for HTML). Its one link goes to the page the form was on (this site's
    ``Referer``, which a GET renders with a new key), never to the refused URL itself,
    which may answer POST alone.
    """
    form = is_form(request)
    back = _same_site_referer(request) if form else ""
    heading, explanation = (
        _FORM.get(error.code, _FORM_DEFAULT) if form else _REQUEST.get(error.code, _REQUEST_DEFAULT)
    )
    context = {
        "status": error.status,
        "code": error.code,
        "title": error.title,
        "detail": error.detail,
        "heading": heading,
        "explanation": explanation,
        "form_url": back if error.code in _FRESH_FORM_HELPS else "",
        "back_url": back,
    }
    response = HttpResponse(_render(context, request), status=error.status)
    response["Cache-Control"] = "no-store"
    return response


def is_form(request: HttpRequest) -> bool:
    """Whether ``request`` is a form's post: a body only an HTML form (or one imitating it)
    sends. Its content type alone decides: the body is never read here."""
    return request.content_type in FORM_TYPES


def _render(context: dict[str, Any], request: HttpRequest) -> str:
    try:
        return loader.render_to_string(TEMPLATE, context, request)
    except TemplateDoesNotExist:
        engine = Engine(dirs=[str(_OWN_TEMPLATES)], autoescape=True)
        return engine.get_template(TEMPLATE).render(Context(context, autoescape=True))


def _same_site_referer(request: HttpRequest) -> str:
    """The path of the page the form was on, when it was this site's (never an outside
    address, never a fragment)."""
    referer = request.headers.get("Referer", "").partition("#")[0]
    host = request.get_host()
    for scheme in ("https://", "http://"):
        if referer.startswith(f"{scheme}{host}/"):
            return referer.removeprefix(f"{scheme}{host}")
    return ""
