"""How often a message's handler failed: the give-up policy's durable count."""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now


class ConsumerFailure(models.Model):
    """One row per message whose handler is running or failed and that is not done; a
    message given up on keeps its row, with ``dead_at``, for the admin (until the purge).

    Counted apart from the broker's deliveries: a redelivery because the database
    was away, or because another consumer held the message, is no failure of its own.
    """

    tenant = models.CharField(max_length=255, blank=True, default="")
    key = models.CharField(max_length=255)  # as stored in the entries: scope, separator, id
    failures = models.PositiveIntegerField(default=0)
    first_failed_at = models.DateTimeField(db_default=Now())
    last_error = models.TextField(blank=True, default="")
    dead_at = models.DateTimeField(null=True, blank=True)  # given up on: a dead letter

    class Meta:
        verbose_name = "consumer failure"
        constraints = [
            models.UniqueConstraint(fields=["tenant", "key"], name="idem_consumer_failure_key")
        ]

    def __str__(self) -> str:
        return f"{self.key!r}: {self.failures} failure(s)"
