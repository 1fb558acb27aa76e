from __future__ import annotations

from django.db import models


class Charge(models.Model):
    """The business write a protected view makes: one per executed request."""

    reference = models.CharField(max_length=255, db_index=True)
    amount = models.IntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.reference}: {self.amount}"
