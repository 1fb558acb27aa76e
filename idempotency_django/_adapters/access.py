"""``idempotency_of(request)``: ``request.idempotency``, typed, for plain and DRF views.

``request.idempotency`` is set at run time on Django's request (DRF's ``Request``
proxies it), but no stub declares it: strict mypy with django-stubs and drf-stubs
rejects ``self.request.idempotency``. The accessor takes either request and
returns the :class:`~idempotency_django.IdempotencyContext`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest

from idempotency_django._protocol.core import IdempotencyContext

if TYPE_CHECKING:
    from rest_framework.request import Request


def idempotency_of(request: HttpRequest | Request) -> IdempotencyContext:
    """The idempotency context of a request that reached a protected view.

    Raises ``ImproperlyConfigured`` for a request no protection has seen (the
    view is not decorated with ``@idempotent`` nor an ``IdempotentMixin`` view).
    """
    context = getattr(request, "idempotency", None)  # DRF's Request reads the Django one's
    if not isinstance(context, IdempotencyContext):
        raise ImproperlyConfigured(
            "idempotency_of(request): this request has no idempotency context; call it in a "
            "view decorated with @idempotent, or on an IdempotentMixin view."
        )
    return context


__all__ = ["idempotency_of"]
