"""``IdempotencyEntry``: one row per (tenant, key); the unique constraint is the lock."""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q

from idempotency_django._protocol.keys import readable


class IdempotencyEntry(models.Model):
    class Status(models.TextChoices):
        IN_PROGRESS = "in_progress", "In progress"
        COMPLETED = "completed", "Completed"
        FAILED_FINAL = "failed_final", "Failed (final)"

    tenant = models.CharField(max_length=255, blank=True)
    key = models.CharField(max_length=255)
    # A keyed hash (HMAC-SHA256) of the canonical request, never the request itself.
    fingerprint = models.CharField(max_length=64)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.IN_PROGRESS)
    # Fencing token: every claim gets a fresh one; writes are conditional on it.
    owner = models.UUIDField(default=uuid.uuid4)
    response_status = models.PositiveSmallIntegerField(null=True, blank=True)
    # Only a custom reason phrase ("Card Declined"); empty means the standard one. The
    # database default lets 0.1.0 servers, mid rolling upgrade, keep inserting claims.
    response_reason = models.CharField(max_length=255, blank=True, default="", db_default="")
    response_headers = models.JSONField(default=list, blank=True)
    response_body = models.BinaryField(null=True, blank=True)
    locked_until = models.DateTimeField()
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()

    class Meta:
        verbose_name = "idempotency entry"
        verbose_name_plural = "idempotency entries"
        # Stored answers are sealed; the admin opens one only for users holding this.
        permissions = [("view_idempotency_body", "Can view stored answers (decrypted)")]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "key"], name="idempotency_tenant_key_uniq"),
        ]
        indexes = [
            models.Index(fields=["expires_at"], name="idempotency_expires_idx"),
            # The zombie scan only ever looks at in-progress rows.
            models.Index(
                fields=["locked_until"],
                name="idempotency_zombie_idx",
                condition=Q(status="in_progress"),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tenant or '-'}:{readable(self.key)} ({self.status})"

    @property
    def is_final(self) -> bool:
        return self.status != self.Status.IN_PROGRESS

    @property
    def readable_key(self) -> str:
        """The key as people read it: ``[scope] key`` for a call's, task's or consumer's key."""
        return readable(self.key)


class IdempotencySecret(models.Model):
    """The server secret when ``IDEMPOTENCY_SECRET`` is unset: one row, never changed."""

    id = models.PositiveSmallIntegerField(primary_key=True)
    value = models.CharField(max_length=128)

    class Meta:
        verbose_name = "idempotency secret"

    def __str__(self) -> str:
        return "idempotency secret"


class IdempotencyDatabase(models.Model):
    """Half of this entries database's identity: random, not secret, written once.

    The other half is what the database's server knows it by (``secret.database_identity``):
    a ``TEMPLATE`` clone or a restored dump carries this row, and a table writer can copy
    it, never the server's half. Together they are bound into every stored answer's seal
    and the replay cache's names, so that a row copied into another database does not
    open there, and two deployments sharing ``SECRET_KEY`` and a Redis never share a
    cached answer.
    """

    id = models.PositiveSmallIntegerField(primary_key=True)
    identity = models.CharField(max_length=64)

    class Meta:
        verbose_name = "idempotency database identity"

    def __str__(self) -> str:
        return "idempotency database identity"


__all__ = ["IdempotencyEntry"]
