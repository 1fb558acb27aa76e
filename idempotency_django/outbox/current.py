"""The protected request being answered right now, for code that isn't handed it.

The core binds it for the duration of a protected view (one ``with`` line in
``core.protect``); :func:`idempotency_django.outbox.enqueue` reads it to derive
its default key. A ``ContextVar``, so threads and asyncio tasks never see each
other's request. This module imports nothing from Django's app registry: the
core may import it whether or not the outbox app is installed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_request: ContextVar[object | None] = ContextVar("idempotency_current_request", default=None)


def request() -> object | None:
    """The protected request being answered in this context, or ``None``."""
    return _request.get()


@contextmanager
def bound(request: object) -> Iterator[None]:
    """Make ``request`` the current protected request inside the ``with`` block."""
    token = _request.set(request)
    try:
        yield
    finally:
        _request.reset(token)
