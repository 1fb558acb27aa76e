"""Make unsafe Django requests safe to retry."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["__version__", "idempotent"]

if TYPE_CHECKING:
    from idempotency_django.decorators import idempotent

    __version__: str


def __getattr__(name: str) -> Any:
    # Lazy so that importing the app (INSTALLED_APPS, settings) never imports
    # Django's model machinery before the app registry is ready.
    if name == "idempotent":
        from idempotency_django.decorators import idempotent

        return idempotent
    if name == "__version__":
        # From the installed metadata: pyproject.toml stays the one place it is written.
        from importlib.metadata import version

        return version("idempotency-django")
    raise AttributeError(name)
