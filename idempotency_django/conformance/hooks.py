"""Test hooks the conformance runner uses to judge what it cannot provoke from outside.

Put :func:`conformance_hooks` directly under the protection (``@idempotent``, Ninja's
``@idempotent``, or on a DRF handler such as ``create``), so a hook runs inside the
claim, after the view's own business writes::

    @idempotent
    @conformance_hooks
    def create_charge(request): ...

The hooks do nothing unless ``IDEMPOTENCY_CONFORMANCE_HOOKS = True`` (off by default;
``check --deploy`` warns when it is on). When on, two request headers steer the view:

``Idempotency-Test-Fail: <status>``
    after the view ran, answer a problem+json with that status instead: a 5xx (or 408,
    409, 425, 429) must then roll its writes back and leave the key free; any other 4xx
    must be stored and replayed.
``Idempotency-Test-Hold: <seconds>``
    after the view ran, hold its transaction open for at most that long (capped at
    :data:`MAX_HOLD`), so that a duplicate arrives while it is in flight. In the same
    process, :func:`wait_entered` and :func:`release` synchronise on the event instead.

Every answer a hook shaped carries ``Idempotency-Test-Hook`` (``fail`` or ``hold``):
that is how the runner knows the endpoint offers them.
"""

from __future__ import annotations

import asyncio
import functools
import json
import threading
from collections.abc import Callable
from inspect import iscoroutinefunction
from typing import Any, TypeVar

from django.http import HttpResponse

from idempotency_django.conformance.headers import FAIL_HEADER, HOLD_HEADER, MARKER_HEADER

MAX_HOLD = 30.0
PROBLEM_TYPE = "https://idempotency-django.readthedocs.io/en/latest/verify.html#test-hooks"

View = TypeVar("View", bound=Callable[..., Any])


class _Holds:
    """In-process rendezvous per idempotency key: the held view says it entered, a test releases."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entered: dict[str, threading.Event] = {}
        self._released: dict[str, threading.Event] = {}

    def _events(self, key: str) -> tuple[threading.Event, threading.Event]:
        with self._lock:
            entered = self._entered.setdefault(key, threading.Event())
            released = self._released.setdefault(key, threading.Event())
            return entered, released

    def hold(self, key: str, seconds: float) -> None:
        entered, released = self._events(key)
        entered.set()
        released.wait(seconds)

    def wait_entered(self, key: str, timeout: float) -> bool:
        return self._events(key)[0].wait(timeout)

    def release(self, key: str) -> None:
        self._events(key)[1].set()

    def forget(self, key: str) -> None:
        with self._lock:
            self._entered.pop(key, None)
            self._released.pop(key, None)


_holds = _Holds()


def wait_entered(key: str, timeout: float) -> bool:
    """Whether a request with ``key`` reached its held view (in this process) within ``timeout``."""
    return _holds.wait_entered(key, timeout)


def release(key: str) -> None:
    """Let the held request with ``key`` (in this process) finish."""
    _holds.release(key)


def forget(key: str) -> None:
    """Drop the rendezvous of ``key`` once its scenario is over."""
    _holds.forget(key)


def enabled() -> bool:
    from idempotency_django._conf import conf

    return conf.CONFORMANCE_HOOKS


def conformance_hooks(view: View) -> View:
    """Wrap a protected view (function, method, Ninja operation; sync or async) with the hooks."""
    if iscoroutinefunction(view):

        @functools.wraps(view)
        async def async_hooked(*args: Any, **kwargs: Any) -> Any:
            answer = await view(*args, **kwargs)
            steer = _steering(args)
            if steer is None:
                return answer
            return await asyncio.to_thread(_apply, steer, answer)

        return async_hooked  # type: ignore[return-value]

    @functools.wraps(view)
    def hooked(*args: Any, **kwargs: Any) -> Any:
        answer = view(*args, **kwargs)
        steer = _steering(args)
        return answer if steer is None else _apply(steer, answer)

    return hooked  # type: ignore[return-value]


def _steering(args: tuple[Any, ...]) -> tuple[str, str, str] | None:
    """``(hook, value, key)`` when the hooks are on and the request asks for one."""
    if not enabled():
        return None
    request = next((a for a in args if hasattr(a, "headers") and hasattr(a, "method")), None)
    if request is None:
        return None
    from idempotency_django._conf import conf

    key = str(request.headers.get(conf.HEADER, ""))
    for hook, header in (("fail", FAIL_HEADER), ("hold", HOLD_HEADER)):
        value = request.headers.get(header)
        if value:
            return hook, str(value), key
    return None


def _apply(steer: tuple[str, str, str], answer: Any) -> Any:
    hook, value, key = steer
    if hook == "fail":
        return _failure(value)
    _holds.hold(key, min(max(_number(value), 0.0), MAX_HOLD))
    if isinstance(answer, HttpResponse):
        answer[MARKER_HEADER] = "hold"
    return answer


def _failure(value: str) -> HttpResponse:
    status = int(_number(value))
    if not 400 <= status <= 599:
        status = 503
    problem = {
        "type": PROBLEM_TYPE,
        "title": "Failure requested by a test hook",
        "status": status,
        "detail": f"{FAIL_HEADER} asked for {status}.",
    }
    response = HttpResponse(
        json.dumps(problem), status=status, content_type="application/problem+json"
    )
    response[MARKER_HEADER] = "fail"
    return response


def _number(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        return 0.0
