"""Server-rendered forms: the hidden key, where a form post's key is read, whose key space.

A form carries its key in a hidden field (``{% idempotency_key_field %}`` or
:class:`IdempotencyKeyField`), drawn fresh each time the form is rendered: a form
rendered once and submitted twice (a double-click, a reload) carries one key; a
form rendered again (a new visit, or the same page re-rendered with its errors)
carries a new one.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import replace
from importlib import import_module
from typing import Any

from django import forms
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest
from django.templatetags.static import static
from django.utils.html import format_html
from django.utils.safestring import SafeString

from idempotency_django._protocol.keys import FORM_TYPES
from idempotency_django._protocol.options import Options, Policy
from idempotency_django.client.policy import new_key
from idempotency_django.tenants import user_pk

FIELD_NAME = "idempotency_key"
# Seconds a form post's duplicate (the second click of a double-click) waits for the first's
# answer before a 409, unless the view sets wait= itself: a person should see the same
# redirect, not an error page. Long enough for a slow view, short enough for a browser.
FORM_WAIT = 5.0
# An anonymous visitor's id, drawn once into their session by the tag: their key space. Not
# the session key, which changes under the visitor's feet (cycle_key(), and every write of a
# signed-cookie session): the back button would then re-send a key into a new key space.
SESSION_MARK = "_idempotency_visitor"
# The script that gives a form its first key back when the browser fetches its page again on
# Back (a never-cached page: the admin's, Cache-Control: no-store). A static file of the app.
KEEPER = "idempotency_django/form-keys.js"


def hidden_input(key: str | None = None) -> SafeString:
    """``<input type="hidden" name="idempotency_key" value="…">`` holding a fresh key."""
    return format_html('<input type="hidden" name="{}" value="{}">', FIELD_NAME, key or new_key())


def keeper_script() -> SafeString:
    """``<script>`` of :data:`KEEPER` (deferred; it runs once, however often included);
    nothing without ``STATIC_URL``, which gives the script its address."""
    if not settings.STATIC_URL:
        return SafeString("")
    return format_html('<script src="{}" defer></script>', static(KEEPER))


class IdempotencyKeyWidget(forms.HiddenInput):
    """A hidden input that holds a fresh key each time it is rendered, bound or not.

    A re-rendered form (its errors shown) was answered already, and that answer is
    stored under the key it was sent with: the corrected form needs a new key. Its
    media (``{{ form.media }}``) is the script that keeps the key across the back button.
    """

    class Media:
        js = (KEEPER,)

    def get_context(self, name: str, value: Any, attrs: dict[str, Any] | None) -> dict[str, Any]:
        return super().get_context(name, new_key(), attrs)


class IdempotencyKeyField(forms.CharField):
    """For forms whose fields are rendered one by one: name it ``idempotency_key``.

    ``idempotency_key = IdempotencyKeyField()``; the protection reads the posted
    value, the form itself ignores it (not required, never an error).
    """

    widget = IdempotencyKeyWidget

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        kwargs.setdefault("label", "")
        super().__init__(**kwargs)


def require_first(cls: type, mixin: type, base: type, example: str) -> None:
    """Refuse ``cls`` when Django's ``base`` comes before ``mixin`` in it: ``base``'s views
    would shadow the mixin's, and nothing would be protected (as DRF's mixin refuses)."""
    mro = cls.__mro__
    if base in mro and mro.index(base) < mro.index(mixin):
        raise ImproperlyConfigured(
            f"{cls.__qualname__}: put {mixin.__name__} before the Django class, "
            f"e.g. class {cls.__name__}({mixin.__name__}, {example})."
        )


def start_visitor_session(request: HttpRequest | None) -> None:
    """Give an anonymous visitor a session, and an id in it, before they post the form."""
    session = getattr(request, "session", None)
    user = getattr(request, "user", None)
    if session is None or (user is not None and user.is_authenticated):
        return
    if not isinstance(session.get(SESSION_MARK), str):
        # An empty session is never saved, nor its cookie set: the id starts it.
        session[SESSION_MARK] = secrets.token_urlsafe(32)


def visitor(request: HttpRequest) -> str:
    """A form post's tenant: the user's pk, else the anonymous visitor's id.

    The id is drawn into the visitor's session by ``{% idempotency_key_field %}``
    (``IdempotencyKeyField`` renders none: then the first post of a visitor who has
    a session draws it). Never the session key, which a ``cycle_key()`` or a
    signed-cookie session's write changes. A credential: only its digest is stored.
    Without a session (``idempotency_django.W090`` warns when the app has none)
    anonymous visitors share one key space, as they do for ``tenants.user_pk``.
    """
    owner = user_pk(request)
    if owner:
        return owner
    session = getattr(request, "session", None)
    if session is None:
        return ""
    visitor_id = session.get(SESSION_MARK)
    if not isinstance(visitor_id, str):
        if not session.session_key:
            return ""
        # A session the tag did not start (IdempotencyKeyField's form): its id drawn now,
        # so that this post's own session writes can't move its retry elsewhere.
        visitor_id = session[SESSION_MARK] = secrets.token_urlsafe(32)
    return visitor_tenant(visitor_id)


def visitor_tenant(visitor_id: str) -> str:
    """The key space of the visitor ``visitor_id``: ``session:`` and a digest of the id."""
    return "session:" + hashlib.sha256(visitor_id.encode()).hexdigest()[:40]


def session_tenant(session_key: str) -> str | None:
    """The key space of the anonymous visitor whose session is ``session_key`` (their
    session cookie's value), as their form posts were stored; ``None`` when that session
    holds no visitor (unknown, expired, or never shown a form by the tag)."""
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    visitor_id = store.get(SESSION_MARK)
    return visitor_tenant(visitor_id) if isinstance(visitor_id, str) else None


def is_form_post(request: HttpRequest, policy: Policy) -> bool:
    """A POST of a form's body without the key header: the key, if any, is its field."""
    return (
        policy.key is None
        and request.method == "POST"
        and request.content_type in FORM_TYPES
        and not _has_header(request, policy)
    )


def _has_header(request: HttpRequest, policy: Policy) -> bool:
    if policy.meta_header:
        return policy.meta_header in request.META
    return policy.header in request.headers


def form_policy(request: HttpRequest, policy: Policy, options: Options) -> Policy:
    """``policy`` for a form post: its duplicate waits, its anonymous caller is the session.

    Only what the view and the settings left to their defaults changes: ``wait=`` set
    on the view, or a project's own ``IDEMPOTENCY_TENANT_RESOLVER``, stand.
    """
    if not is_form_post(request, policy):
        return policy
    changes: dict[str, Any] = {}
    if options.wait is None and policy.wait < FORM_WAIT:
        changes["wait"] = FORM_WAIT
    if policy.tenant is user_pk:
        changes["tenant"] = visitor
    return replace(policy, **changes) if changes else policy


__all__ = ["FORM_WAIT", "IdempotencyKeyField"]
