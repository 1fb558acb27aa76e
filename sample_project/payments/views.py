"""Function views of the sample: one protected create view, two pages."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.templatetags.static import static
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from idempotency_django import IdempotentRequest, idempotent
from idempotency_django.conformance import conformance_hooks
from idempotency_django.models import IdempotencyEntry
from idempotency_django.outbox import enqueue
from sample_project.payments.models import Charge
from sample_project.payments.tasks import send_receipt


def favicon(request: HttpRequest) -> HttpResponse:
    """Browsers ask for /favicon.ico on every page that names no icon (the admin's, the API docs')."""
    return redirect(static("payments/favicon.svg"))


def index(request: HttpRequest) -> HttpResponse:
    entries = IdempotencyEntry.objects.order_by("-created_at")[:20]
    context = {"charges": Charge.objects.all()[:20], "entries": entries}
    return render(request, "payments/index.html", context)


@csrf_exempt
@require_POST
@idempotent
@conformance_hooks  # inert unless IDEMPOTENCY_CONFORMANCE_HOOKS (docs/verify.rst)
def create_charge(request: IdempotentRequest) -> HttpResponse:
    """Take a payment: ``{"amount": 1000, "currency": "eur", "description": "..."}``."""
    try:
        data = json.loads(request.body)
        amount = int(data["amount"])
    except (ValueError, KeyError, TypeError):
        # A final 4xx: stored and replayed, like a success.
        return JsonResponse({"error": 'send JSON like {"amount": 1000}'}, status=400)
    if amount <= 0:
        return JsonResponse({"error": "amount must be positive"}, status=400)
    charge = Charge.objects.create(
        user=request.user if request.user.is_authenticated else None,
        amount=amount,
        currency=str(data.get("currency", "eur"))[:3],
        description=str(data.get("description", ""))[:200],
        provider_key=request.idempotency.derive("provider"),
    )
    # Published after commit, at least once, under request.idempotency.derive(task name).
    enqueue(receipt_task(), charge.pk)
    response = JsonResponse(_as_json(charge), status=201)
    response["Location"] = f"/charges/{charge.pk}/"
    return response


def receipt_task() -> Any:
    """The receipt as a Celery task, or as a django.tasks task (``SAMPLE_TASKS=django``)."""
    if getattr(settings, "SAMPLE_TASKS", "celery") == "django":
        from sample_project.payments.receipts import receipt

        return receipt
    return send_receipt


def charge_detail(request: HttpRequest, pk: int) -> HttpResponse:
    return JsonResponse(_as_json(get_object_or_404(Charge, pk=pk)))


def _as_json(charge: Charge) -> dict[str, object]:
    return {
        "id": charge.pk,
        "amount": charge.amount,
        "currency": charge.currency,
        "description": charge.description,
        "created_at": charge.created_at.isoformat(),
    }
