"""The outbox's one exception, below every other outbox module (none imports back)."""

from __future__ import annotations


class OutboxError(RuntimeError):
    """The outbox was used in a way that cannot keep its promise (a programming error)."""
