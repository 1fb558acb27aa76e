"""Make unsafe Django requests safe to retry."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["idempotent"]

if TYPE_CHECKING:
    from idempotency_django.decorators import idempotent


def __getattr__(name: str) -> Any:
    # Lazy so that importing the app (INSTALLED_APPS, settings) never imports
    # Django's model machinery before the app registry is ready.
    if name == "idempotent":
        from idempotency_django.decorators import idempotent

        return idempotent
    raise AttributeError(name)
