"""A signed webhook (a payment provider's events), processed once per event id.

The sender signs the raw body: ``X-Signature: sha256=<hex HMAC-SHA256 of the
body with WEBHOOK_SECRET>``. The signature is checked before the claim, so a
forged request never takes an event's key; the event id is the idempotency key,
so the provider's redeliveries of one event get the stored 200 without work.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from idempotency_django import idempotent
from sample_project.payments.models import Charge

View = Callable[..., HttpResponse]


def sign(body: bytes, secret: str | None = None) -> str:
    """The ``X-Signature`` header value the sender puts on ``body``."""
    key = (secret or settings.WEBHOOK_SECRET).encode()
    return "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()


def signed(view: View) -> View:
    """Answer 401 before anything else unless the body carries a valid signature."""

    def check(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        given = request.headers.get("X-Signature", "")
        if not hmac.compare_digest(given, sign(request.body)):
            return JsonResponse({"error": "bad signature"}, status=401)
        return view(request, *args, **kwargs)

    return check


def event_id(request: HttpRequest) -> str | None:
    """The key extractor: the event's id from the (already verified) JSON body."""
    try:
        event = json.loads(request.body)
    except ValueError:
        return None
    found = event.get("id") if isinstance(event, dict) else None
    return found if isinstance(found, str) else None


@csrf_exempt
@require_POST
@signed
@idempotent(key=event_id)
def provider_webhook(request: HttpRequest) -> HttpResponse:
    """``{"id": "evt_1", "type": "charge.refunded", "data": {"charge": 12}}``."""
    event = json.loads(request.body)
    if event.get("type") == "charge.refunded":
        charge = Charge.objects.filter(pk=event.get("data", {}).get("charge")).first()
        if charge is not None:
            # Not idempotent by itself: a second run would append twice.
            charge.description = f"{charge.description} [refunded by {event['id']}]".strip()
            charge.save(update_fields=["description"])
    return JsonResponse({"received": event["id"]})
