"""What a protected operation adds to an OpenAPI document, for every schema generator.

Plain data, no framework: :mod:`.spectacular` (DRF) and :mod:`.ninja` (Django Ninja)
each place it their own way.
"""

from __future__ import annotations

from typing import Any, Final

from idempotency_django._conf import conf

PROBLEM_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "description": "RFC 9457 problem details.",
    "properties": {
        "type": {"type": "string", "format": "uri"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
    },
    "required": ["type", "title", "status", "detail"],
}
#: The answers a protected operation may give besides its own, by status code.
ERRORS: Final[dict[int, str]] = {
    400: "The idempotency key is missing (when required) or malformed.",
    409: "A request with this idempotency key is still in progress; retry after Retry-After seconds.",
    422: "This idempotency key was already used with a different request.",
    503: "The idempotency store is unavailable; nothing ran. Retry after Retry-After seconds.",
}
#: The codes that carry ``Retry-After``.
RETRY_AFTER_CODES: Final = frozenset({409, 503})
RETRY_AFTER: Final[dict[str, Any]] = {
    "schema": {"type": "integer"},
    "description": "Seconds to wait before retrying.",
}


def key_parameter(name: str, required: bool) -> dict[str, Any]:
    """The key's header parameter (its length bounded by ``IDEMPOTENCY_KEY_MAX_LENGTH``)."""
    return {
        "in": "header",
        "name": name,
        "required": required,
        "schema": {"type": "string", "minLength": 1, "maxLength": conf.KEY_MAX_LENGTH},
        "description": (
            "Makes the request safe to retry: a retry with the same key and the same "
            "request gets the first answer again, and the operation runs once. "
            "Use a new unique value (e.g. a UUID) for each distinct request."
        ),
    }
