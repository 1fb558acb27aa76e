from __future__ import annotations

from django.conf import settings
from django.db import models


class Charge(models.Model):
    """A payment taken from a customer: the write that must happen once."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    amount = models.PositiveIntegerField()
    currency = models.CharField(max_length=3, default="eur")
    description = models.CharField(max_length=200, blank=True)
    # What we sent the (imaginary) payment provider as its own Idempotency-Key.
    provider_key = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.amount} {self.currency} (#{self.pk})"
