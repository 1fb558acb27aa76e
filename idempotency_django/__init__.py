"""Make unsafe Django requests safe to retry."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__all__ = [
    "IdempotencyContext",
    "IdempotentRequest",
    "__version__",
    "idempotency_exempt",
    "idempotency_of",
    "idempotent",
    "idempotent_call",
    "idempotent_function",
]

if TYPE_CHECKING:
    from idempotency_django._adapters.access import idempotency_of
    from idempotency_django._adapters.decorators import idempotent
    from idempotency_django._protocol.core import IdempotencyContext, IdempotentRequest
    from idempotency_django.calls import idempotent_call, idempotent_function
    from idempotency_django.middleware import idempotency_exempt

    __version__: str

_LAZY = {
    "idempotent": "idempotency_django._adapters.decorators",
    "idempotent_call": "idempotency_django.calls",
    "idempotent_function": "idempotency_django.calls",
    "IdempotencyContext": "idempotency_django._protocol.core",
    "IdempotentRequest": "idempotency_django._protocol.core",
    "idempotency_of": "idempotency_django._adapters.access",
    "idempotency_exempt": "idempotency_django.middleware",
}


def __getattr__(name: str) -> Any:
    # Lazy so that importing the app (INSTALLED_APPS, settings) never imports
    # Django's model machinery before the app registry is ready.
    if name == "__version__":
        # From the installed metadata: pyproject.toml stays the one place it is written.
        from importlib.metadata import version

        return version("idempotency-django")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(name)
    return getattr(import_module(module), name)
