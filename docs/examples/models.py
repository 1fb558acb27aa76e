"""The quick start's models: a charge, and refunds of it."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Charge(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.CASCADE)
    amount = models.PositiveIntegerField()
    # What we would send the payment provider as its own Idempotency-Key.
    provider_key = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"charge {self.pk}: {self.amount}"


class Refund(models.Model):
    charge = models.ForeignKey(Charge, on_delete=models.CASCADE, related_name="refunds")
    amount = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"refund {self.pk} of charge {self.charge_id}: {self.amount}"
