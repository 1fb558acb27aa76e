"""The checkout demo: a Pay button safe to double-click and retry, and a form recipe.

``pay`` is what the page's script calls through ``idempotentFetch``; its body may
ask it to be slow (``delay``) or to fail its first answers (``fail``) so that the
page, and the browser tests, can show a timed-out retry and a 503 retried.
``pay_form`` is the same payment without JavaScript: the key travels in a hidden
field and the answer is a redirect to the receipt.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import threading
import time
import uuid
from typing import Any

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.cache import add_never_cache_headers
from django.utils.module_loading import import_string
from django.views.decorators.csrf import ensure_csrf_cookie
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from idempotency_django import IdempotencyContext, IdempotentRequest, idempotent
from sample_project.payments.models import Charge

MAX_DELAY = 5.0  # seconds: the slowest the demo lets a payment be
MAX_FAULTS = 3
FORM_WAIT = 10.0  # seconds a duplicate form submission waits for the first one
FAULT_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})
ORDER = re.compile(r"[0-9a-f]{12}")
UUID7 = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")

# How many executions per key have been failed on purpose. Per process: the demo runs
# under runserver; the failed executions rolled back, so this can't live in the database.
_faults: dict[tuple[str, str | None], int] = {}
_faults_lock = threading.Lock()


def uuid7() -> str:
    """A UUIDv7 (RFC 9562): time-ordered, so new keys land at the end of the index."""
    value = (time.time_ns() // 1_000_000) << 80 | int.from_bytes(os.urandom(10), "big")
    value = (value & ~(0xF << 76)) | (0x7 << 76)
    value = (value & ~(0x3 << 62)) | (0x2 << 62)
    return str(uuid.UUID(int=value))


def new_order() -> str:
    return secrets.token_hex(6)


@require_GET
@ensure_csrf_cookie
def checkout(request: HttpRequest) -> HttpResponse:
    """The page: one order, a Pay button, and a log of every request and answer."""
    return render(request, "payments/checkout.html", {"order": new_order()})


@require_POST
@idempotent
def pay(request: IdempotentRequest) -> HttpResponse:
    """Charge an order: ``{"order": "...", "amount": 1999, "delay": 0, "fail": 0}``."""
    try:
        data = _payment(json.loads(request.body))
    except (ValueError, KeyError, TypeError) as error:
        return JsonResponse({"error": str(error)}, status=400)  # final: stored and replayed
    fault = _injected_fault(request, data)
    if fault is not None:
        return fault
    time.sleep(data["delay"])  # the payment provider taking its time
    charge = _charge(request, data["order"], data["amount"])
    response = JsonResponse(charge_json(charge), status=201)
    response["Location"] = f"/checkout/receipts/{charge.pk}/"
    return response


@require_GET
def order_status(request: HttpRequest, order: str) -> HttpResponse:
    """The charges taken for an order: what the page shows beside its log."""
    if not ORDER.fullmatch(order):
        raise Http404("no such order")
    charges = Charge.objects.filter(description=_description(order))
    ids = sorted(charges.values_list("pk", flat=True))
    answer = {"order": order, "charges": len(ids), "ids": ids}
    key = request.GET.get("key")
    if key:  # ?key=<intent>: the charges that intent made, whatever its retries
        answer["intent_charges"] = charges.filter(provider_key=_provider_key(request, key)).count()
    return JsonResponse(answer)


def _provider_key(request: HttpRequest, key: str) -> str:
    """What ``request.idempotency.derive("provider")`` gave the payment sent with ``key``."""
    resolver = getattr(
        settings, "IDEMPOTENCY_TENANT_RESOLVER", "idempotency_django.tenants.user_pk"
    )
    tenant = import_string(resolver)(request)
    return IdempotencyContext(key=key, tenant=tenant).derive("provider")


# wait=: a second submission arriving while the first still runs waits for its answer
# (the browser shows only the last submission's answer: a 409 there would hide the receipt).
@require_http_methods(["GET", "POST"])
@idempotent(wait=FORM_WAIT)  # the key: the form's idempotency_key field
def pay_form(request: IdempotentRequest) -> HttpResponse:
    """The no-JavaScript recipe: GET renders a fresh key, POST charges and redirects."""
    if request.method == "GET":
        return form_page(request)
    order, amount = request.POST.get("order", ""), request.POST.get("amount", "")
    if not ORDER.fullmatch(order) or not amount.isdigit() or int(amount) <= 0:
        return render(request, "payments/form.html", {"error": "Bad order or amount."}, status=400)
    time.sleep(_delay(request.GET.get("delay")))  # ?delay=1: slow enough to submit twice
    charge = _charge(request, order, int(amount))
    return redirect("checkout-receipt", pk=charge.pk)  # 302: the browser GETs the receipt


def form_page(request: HttpRequest) -> HttpResponse:
    """The form ({% idempotency_key_field %} draws the key) for a new order, or for
    ``?order=<id>``; ``?cache=never`` sends it never-cached, as the admin's pages are
    (Back then fetches it again: docs/forms.rst, "The three stories")."""
    order = request.GET.get("order", "")
    context = {"order": order if ORDER.fullmatch(order) else new_order()}
    response = render(request, "payments/form.html", context)
    if request.GET.get("cache") == "never":
        add_never_cache_headers(response)
    return response


@require_GET
def receipt(request: HttpRequest, pk: int) -> HttpResponse:
    charge = get_object_or_404(Charge, pk=pk, description__startswith="checkout ")
    order = charge.description.removeprefix("checkout ")
    count = Charge.objects.filter(description=charge.description).count()
    return render(
        request, "payments/receipt.html", {"charge": charge, "order": order, "count": count}
    )


def charge_json(charge: Charge) -> dict[str, Any]:
    return {
        "id": charge.pk,
        "order": charge.description.removeprefix("checkout "),
        "amount": charge.amount,
        "currency": charge.currency,
        "provider_key": charge.provider_key,
        "created_at": charge.created_at.isoformat(),
    }


def _payment(data: Any) -> dict[str, Any]:
    order, amount = str(data["order"]), int(data["amount"])
    if not ORDER.fullmatch(order):
        raise ValueError("order must be 12 hex digits")
    if amount <= 0:
        raise ValueError("amount must be positive")
    fail_status = int(data.get("fail_status", 503))
    if fail_status not in FAULT_STATUSES:
        raise ValueError(f"fail_status must be one of {sorted(FAULT_STATUSES)}")
    return {
        "order": order,
        "amount": amount,
        "delay": _delay(data.get("delay")),
        "fail": min(max(int(data.get("fail", 0)), 0), MAX_FAULTS),
        "fail_status": fail_status,
    }


def _injected_fault(request: IdempotentRequest, data: dict[str, Any]) -> HttpResponse | None:
    """The first ``fail`` executions for this key answer ``fail_status``: a transient error."""
    if not data["fail"]:
        return None
    context = request.idempotency
    with _faults_lock:
        failed = _faults.get((context.tenant, context.key), 0)
        if failed >= data["fail"]:
            return None
        _faults[(context.tenant, context.key)] = failed + 1
    status = data["fail_status"]
    response = JsonResponse({"error": "injected fault", "attempt": failed + 1}, status=status)
    if status in (429, 503):
        response["Retry-After"] = "1"
    return response


def _charge(request: IdempotentRequest, order: str, amount: int) -> Charge:
    return Charge.objects.create(
        user=request.user if request.user.is_authenticated else None,
        amount=amount,
        description=_description(order),
        # What we'd send the payment provider as its own Idempotency-Key.
        provider_key=request.idempotency.derive("provider"),
    )


def _delay(value: object) -> float:
    """Seconds to pretend the payment provider takes, within bounds."""
    try:
        seconds = float(value or 0)  # type: ignore[arg-type]
    except ValueError:
        return 0.0
    return min(max(seconds, 0.0), MAX_DELAY)


def _description(order: str) -> str:
    return f"checkout {order}"
