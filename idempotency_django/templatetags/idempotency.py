"""``{% load idempotency %}``: ``{% idempotency_key_field %}`` inside a ``<form>``."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.safestring import SafeString

from idempotency_django.forms import hidden_input, keeper_script, start_visitor_session

register = template.Library()


@register.simple_tag(takes_context=True)
def idempotency_key_field(context: Any) -> SafeString:
    """A hidden ``idempotency_key`` input holding a fresh key (UUIDv7) per rendering, and
    the script that keeps the key across the back button when the page is fetched again.

    With the request in the context (``django.template.context_processors.request``),
    an anonymous visitor's session is started here, so the post finds it.
    """
    start_visitor_session(context.get("request"))
    return hidden_input() + keeper_script()
