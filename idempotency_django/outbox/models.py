"""One row per task to publish after its transaction commits."""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now


class OutboxMessage(models.Model):
    """A task to publish at least once, always under the same ``key`` (its Celery task id)."""

    key = models.CharField(max_length=255, db_index=True)
    task = models.CharField(max_length=255)
    args = models.JSONField(default=list)
    kwargs = models.JSONField(default=dict)
    # Extra ``apply_async`` options kept JSON-simple (queue, routing_key, priority, ...).
    options = models.JSONField(default=dict)
    created_at = models.DateTimeField(db_default=Now())
    # The relay leaves a row alone until then: a short grace for the on_commit fast
    # path after enqueue, the backoff after a failed publish.
    next_attempt_at = models.DateTimeField(db_default=Now())
    sent_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    failures = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True, default="")
    # Set when its publishes failed IDEMPOTENCY_OUTBOX_MAX_ATTEMPTS times: the relay
    # leaves it alone until an operator sends it again (or discards it) in the admin.
    dead_at = models.DateTimeField(null=True, blank=True)
    # The last failed publish may have reached the broker (its confirm timed out): a
    # dead letter sent again may then be a second delivery.
    uncertain = models.BooleanField(default=False, db_default=False)

    class Meta:
        verbose_name = "outbox message"
        ordering = ["-created_at"]
        indexes = [
            models.Index(
                fields=["next_attempt_at"],
                name="idem_outbox_pending",
                condition=models.Q(sent_at__isnull=True),
            ),
            models.Index(fields=["sent_at"], name="idem_outbox_sent"),
        ]

    def __str__(self) -> str:
        return f"{self.task} [{self.key}]"
