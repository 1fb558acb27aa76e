"""Built-in tenant resolvers (``IDEMPOTENCY_TENANT_RESOLVER``)."""

from __future__ import annotations

from django.http import HttpRequest


def user_pk(request: HttpRequest) -> str:
    """The authenticated user's primary key; ``""`` for anonymous callers.

    Anonymous callers share one key space: protect anonymous endpoints (such as
    webhooks) with a resolver of their own, e.g. the sender's account id.
    """
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return ""
    return str(user.pk)


__all__ = ["user_pk"]
