"""DRF throttles after the claim: a replay, a 409 or a 422 spends no throttle budget.

DRF checks throttles in ``initial()``, before the mixin claims the key, so a client
retrying a timed-out payment spent budget, and got 429, for an answer already
stored. On a protected request the mixin defers them to the handler: they run once
the claim is won, that is only when the view is about to execute. A refusal there
is raised inside the protected execution and, like every throttle refusal, is
never stored: the key is free again. Safe methods and unprotected requests are
throttled in ``initial()`` as before. Importing this module imports DRF.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from inspect import iscoroutinefunction
from typing import Any

from asgiref.sync import sync_to_async
from rest_framework.request import Request
from rest_framework.views import APIView

_DEFERRED = "_idempotency_throttles_deferred"


def defer(view: APIView) -> None:
    """From now on ``view.check_throttles()`` waits for :func:`throttled_first`."""
    setattr(view, _DEFERRED, True)


def deferred(view: APIView) -> bool:
    """Whether ``check_throttles()`` is to do nothing yet (called from ``initial()``)."""
    return bool(getattr(view, _DEFERRED, False))


def throttled_first(view: APIView, handler: Callable[..., Any]) -> Callable[..., Any]:
    """``handler``, run after the view's throttle checks (sync or ``async def`` alike)."""
    if iscoroutinefunction(handler):

        @functools.wraps(handler)
        async def checked_async(request: Request, *args: Any, **kwargs: Any) -> Any:
            await sync_to_async(_check)(view, request)
            result: Awaitable[Any] = handler(request, *args, **kwargs)
            return await result

        return checked_async

    @functools.wraps(handler)
    def checked(request: Request, *args: Any, **kwargs: Any) -> Any:
        _check(view, request)
        return handler(request, *args, **kwargs)

    return checked


def _check(view: APIView, request: Request) -> None:
    setattr(view, _DEFERRED, False)
    view.check_throttles(request)


__all__ = ["defer", "deferred", "throttled_first"]
