"""One business write, served unprotected and protected, so that the difference is ours.

Every protected view wraps :func:`business` (one INSERT) and runs it in the
transaction ``@idempotent`` opens; the unprotected reference runs the same
INSERT in an ``atomic()`` block of its own, so both pay one business
transaction and the difference is the protocol's work.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse

from bench.settings import OUTBOX, PEER, PEER_REDIS_URL
from idempotency_django import idempotent
from tests.testapp.models import Charge

# How long a held request waits for its release file at most (bench.inprocess, bench.http_cases).
HOLD = 90.0


def business(request: HttpRequest, using: str = "default") -> HttpResponse:
    """The business write: one INSERT (in whatever transaction is open)."""
    reference = request.headers.get("Idempotency-Key", "")
    charge = Charge.objects.using(using).create(reference=reference, amount=100)
    return JsonResponse({"id": charge.pk, "amount": charge.amount}, status=201)


def unprotected(request: HttpRequest) -> HttpResponse:
    """The reference: the business write in a transaction of its own (BEGIN, INSERT, COMMIT)."""
    with transaction.atomic():
        return business(request)


def autocommit(request: HttpRequest) -> HttpResponse:
    """The business write alone in autocommit (one round trip): what a view without atomic() pays."""
    return business(request)


def unprotected_prepared(request: HttpRequest) -> HttpResponse:
    """The reference through the "prepared" alias (server-side binding, prepared statements)."""
    with transaction.atomic(using="prepared"):
        return business(request, "prepared")


def _prepared_business(request: HttpRequest) -> HttpResponse:
    return business(request, "prepared")


def held(request: HttpRequest) -> HttpResponse:
    """The business write, then wait (inside the claim's transaction) for a release file."""
    response = business(request)
    release = Path(request.headers["X-Bench-Release"])
    Path(f"{release}.entered").touch()
    deadline = time.monotonic() + HOLD
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return response


def enqueuing(request: HttpRequest) -> HttpResponse:
    """The business write and one ``enqueue()`` of a receipt (issue 12's outbox)."""
    from idempotency_django.outbox import enqueue  # type: ignore[import-not-found, unused-ignore]

    response = business(request)
    enqueue("bench.receipt", 100)
    return response


lock = idempotent(protocol="lock")(business)
lease = idempotent(protocol="lease")(business)
lock_cached = idempotent(protocol="lock", cache="replay")(business)
lock_cached_generic = idempotent(protocol="lock", cache="replay_generic")(business)


lock_prepared = idempotent(protocol="lock", database="prepared")(_prepared_business)
held_lock = idempotent(protocol="lock")(held)
held_lease = idempotent(protocol="lease")(held)
lock_enqueue = idempotent(protocol="lock")(enqueuing) if OUTBOX else None


def ping(request: HttpRequest) -> HttpResponse:
    """Readiness of the server, without touching the database."""
    return HttpResponse(status=204)


def _drf_views(token: bool = False) -> tuple[Callable[..., HttpResponse], ...]:
    """A plain DRF view, the same one with ``IdempotentMixin`` (the mixin's own cost), and
    with django-idempotency-key, the peer, in its two set-ups (see :func:`_peer`).

    ``token``: the caller authenticates with DRF's ``TokenAuthentication`` (one query),
    as an API's clients do; the mixin's tenant is then the token's user.
    """
    from rest_framework.authentication import TokenAuthentication
    from rest_framework.parsers import JSONParser
    from rest_framework.permissions import IsAuthenticated
    from rest_framework.renderers import JSONRenderer
    from rest_framework.request import Request
    from rest_framework.response import Response
    from rest_framework.views import APIView

    from idempotency_django.rest_framework import IdempotentMixin

    class Plain(APIView):
        authentication_classes = (TokenAuthentication,) if token else ()
        permission_classes = (IsAuthenticated,) if token else ()
        renderer_classes = (JSONRenderer,)
        parser_classes = (JSONParser,)

        def post(self, request: Request) -> Response:
            reference = request.headers.get("Idempotency-Key", "")
            charge = Charge.objects.create(reference=reference, amount=100)
            return Response({"id": charge.pk, "amount": charge.amount}, status=201)

    class Protected(IdempotentMixin, Plain):
        idempotency_protocol = "lock"

    plain = Plain.as_view()
    return plain, Protected.as_view(), _peer(plain), _peer(plain, shared=True)


def _peer(view: Callable[..., HttpResponse], shared: bool = False) -> Callable[..., HttpResponse]:
    """``view`` under django-idempotency-key (its decorator and its middleware, on this view),
    or a stand-in answering 501 where it isn't installed (``make bench`` skips its cases).

    Its defaults keep answers in process memory behind a thread lock (one process only);
    ``shared``: as several workers need it, answers in a Redis cache and its Redis lock.
    """
    if not PEER:
        return lambda request: HttpResponse(status=501)
    from django.test.utils import override_settings
    from django.utils.decorators import decorator_from_middleware
    from idempotency_key.decorators import idempotency_key
    from idempotency_key.middleware import ExemptIdempotencyKeyMiddleware

    config = {}
    if shared:
        config = {
            "STORAGE": {"CLASS": "idempotency_key.storage.CacheKeyStorage"},
            "LOCK": {
                "CLASS": "idempotency_key.locks.redis.MultiProcessRedisLock",
                "LOCATION": PEER_REDIS_URL,
                "NAME": "bench-peer-lock",
            },
        }
    # Its storage and lock are built from settings when the middleware is.
    with override_settings(IDEMPOTENCY_KEY=config):
        marked = idempotency_key(cache_name="peer" if shared else None)(view)
        peer = decorator_from_middleware(ExemptIdempotencyKeyMiddleware)(marked)
    return cast("Callable[..., HttpResponse]", peer)


drf_plain, drf_lock, drf_peer, _ = _drf_views()
drf_token_plain, drf_token_lock, drf_token_peer, drf_token_peer_shared = _drf_views(token=True)
