"""The sample's one idempotent task: a receipt per charge, sent through the outbox."""

from __future__ import annotations

from typing import Any

from celery import shared_task
from django.core.mail import send_mail

from idempotency_django.celery import idempotent_task
from sample_project.payments.models import Charge


@shared_task(acks_late=True, reject_on_worker_lost=True)
@idempotent_task
def send_receipt(charge_id: int) -> dict[str, Any]:
    """E-mail a receipt once per outbox key (the task id), however often it is delivered."""
    return mail_receipt(charge_id)


def mail_receipt(charge_id: int) -> dict[str, Any]:
    """The receipt's body, shared with the django.tasks version (receipts.py)."""
    charge = Charge.objects.get(pk=charge_id)
    recipient = charge.user.email if charge.user and charge.user.email else "customer@example.com"
    send_mail(
        subject=f"Your receipt for charge #{charge.pk}",
        message=f"We took {charge.amount} {charge.currency}: {charge.description or 'thank you'}.",
        from_email="payments@example.com",
        recipient_list=[recipient],
    )
    return {"charge": charge.pk, "sent_to": recipient}
