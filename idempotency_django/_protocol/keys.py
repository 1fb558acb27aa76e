"""Parsing the client's key: a visible-ASCII token or a quoted Structured Field string."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from idempotency_django.exceptions import KeyMalformed

# Joins a call's or task's scope to its key (``calls.namespaced``): no header key holds it.
SEPARATOR = "\x1f"
_VISIBLE = frozenset(range(0x21, 0x7F))
_SF_STRING_CHARS = frozenset(range(0x20, 0x7F)) - {0x22, 0x5C}
# The bodies a browser's form posts: a key in a field of theirs is read from request.POST.
FORM_TYPES = frozenset({"application/x-www-form-urlencoded", "multipart/form-data"})


def parse_key(raw: str | bytes, max_length: int) -> str:
    """Return the key a header value carries, or raise ``KeyMalformed``.

    ``"abc"`` is an RFC 8941 sf-string and means ``abc``; anything else must be
    visible ASCII. Surrounding optional whitespace is ignored.
    """
    try:
        # Strict: replacing what Latin-1 can't hold with "?" would merge distinct keys.
        value = raw if isinstance(raw, bytes) else raw.encode("latin-1")
    except UnicodeEncodeError:
        raise KeyMalformed("The idempotency key must be visible ASCII characters.") from None
    value = value.strip(b" \t")
    key = _parse_sf_string(value) if value.startswith(b'"') else _parse_token(value)
    if not key:
        raise KeyMalformed("The idempotency key is empty.")
    if len(key) > max_length:
        raise KeyMalformed(f"The idempotency key is longer than {max_length} characters.")
    return key


def _parse_token(value: bytes) -> str:
    if value.translate(None, _VISIBLE_BYTES):  # anything left is not visible ASCII
        raise KeyMalformed("The idempotency key must be visible ASCII characters.")
    return value.decode("ascii")


_VISIBLE_BYTES = bytes(sorted(_VISIBLE))


def _parse_sf_string(value: bytes) -> str:
    # RFC 8941 section 4.2.5: only \" and \\ are escapes.
    out = bytearray()
    body, index = value[1:], 0
    while index < len(body):
        byte = body[index]
        if byte == 0x5C and index + 1 < len(body) and body[index + 1] in (0x22, 0x5C):
            out.append(body[index + 1])
            index += 2
        elif byte == 0x22 and index == len(body) - 1:
            return out.decode("ascii")
        elif byte in _SF_STRING_CHARS:
            out.append(byte)
            index += 1
        else:
            break
    raise KeyMalformed("The idempotency key is not a valid quoted string.")


def extracted(extractor: Callable[[Any], object], request: Any) -> str | bytes | None:
    """What a view's ``key=`` extractor found, or ``KeyMalformed`` when the client's request
    doesn't hold a usable key (a non-JSON body, a numeric id, a missing field): a 400
    problem, never a 500."""
    try:
        raw = extractor(request)
    except (ValueError, LookupError, TypeError, AttributeError) as exc:
        raise KeyMalformed("The idempotency key could not be read from the request.") from exc
    if raw is None or isinstance(raw, str | bytes):
        return raw
    raise KeyMalformed(f"The idempotency key must be a string, not {type(raw).__name__}.")


def form_field(request: Any, name: str) -> str | None:
    """The key a form POST carries in its field ``name`` (``None``: none, or not a form).

    Only Django's own request: DRF and Ninja parse their bodies themselves, after
    their authentication, and take their keys from the header.
    """
    if request.method != "POST" or request.content_type not in FORM_TYPES:
        return None
    value = request.POST.get(name)
    return value if isinstance(value, str) else None


def readable(stored: str) -> str:
    """A stored key as people read it: ``[scope] key`` for a call's or task's key."""
    scope, separator, key = stored.partition(SEPARATOR)
    return f"[{scope}] {key}" if separator else stored
