"""Log lines for the library's signals, on the ``idempotency_django`` logger.

Connected by the app's ``AppConfig.ready()``. Each receiver returns at once
when its level is off, before building any text. The key is never logged:
``key_digest`` (a short keyed digest of tenant and key) stands for it, in the
message and in ``extra=``. Replay-cache failures are not logged here: the cache
module's own warning is their line.
"""

from __future__ import annotations

import logging
from typing import Any, Final

from idempotency_django import signals

logger = logging.getLogger("idempotency_django")

#: The level of each outcome's line: what is expected is DEBUG, what a client
#: or an operator may need to look at is INFO.
LEVELS: Final[dict[str, int]] = {
    signals.EXECUTED: logging.DEBUG,
    signals.REPLAYED: logging.DEBUG,
    signals.IN_PROGRESS: logging.INFO,
    signals.KEY_REUSED: logging.INFO,
    signals.KEY_MISSING: logging.INFO,
    signals.KEY_MALFORMED: logging.INFO,
    signals.UNAVAILABLE: logging.INFO,
}
_UID: Final = "idempotency_django.log"


def connect() -> None:
    """Connect the receivers (idempotent: each has a ``dispatch_uid``)."""
    signals.connect_selective(signals.outcome, on_outcome, f"{_UID}.outcome", wants)
    signals.entry_reclaimed.connect(on_entry_reclaimed, dispatch_uid=f"{_UID}.reclaimed")
    signals.purge_finished.connect(on_purge_finished, dispatch_uid=f"{_UID}.purge")


def wants(outcome: str) -> bool:
    """Whether :func:`on_outcome` would log ``outcome`` at the logger's level now."""
    return logger.isEnabledFor(LEVELS.get(outcome, logging.INFO))


def on_outcome(sender: object, **fields: Any) -> None:
    """``idempotency executed (stored): POST create-charge -> 201, key 3f2a9c1be4d0, ...``."""
    outcome = fields.get("outcome")
    level = LEVELS.get(str(outcome), logging.INFO)
    if not logger.isEnabledFor(level):
        return
    digest = fields.get("key_digest")
    logger.log(
        level,
        "idempotency %s%s: %s, key %s%s",
        outcome,
        _detail(fields),
        _where(sender, fields),
        digest or "-",
        _timings(fields),
        extra={
            "key_digest": digest,
            "idempotency_outcome": outcome,
            "idempotency_route": fields.get("route"),
            "idempotency_method": fields.get("method"),
            "idempotency_status": fields.get("status"),
        },
    )


def on_entry_reclaimed(sender: object, **fields: Any) -> None:
    """``idempotency reclaimed 3 abandoned entries on 'default' (purge)``."""
    if not logger.isEnabledFor(logging.INFO):
        return
    count = fields.get("count", 0)
    logger.info(
        "idempotency reclaimed %d abandoned %s on %r (%s)",
        count,
        "entry" if count == 1 else "entries",
        fields.get("database"),
        fields.get("how"),
    )


def on_purge_finished(sender: object, **fields: Any) -> None:
    """``idempotency purge on 'default': deleted 12 expired and 3 abandoned entries in 0.42 s``."""
    if not logger.isEnabledFor(logging.INFO):
        return
    dry_run = bool(fields.get("dry_run"))
    logger.info(
        "idempotency purge on %r%s: %s %d expired and %d abandoned entries in %.2f s",
        fields.get("database"),
        " (dry run)" if dry_run else "",
        "would delete" if dry_run else "deleted",
        fields.get("expired", 0),
        fields.get("abandoned", 0),
        fields.get("seconds") or 0.0,
    )


def _detail(fields: dict[str, Any]) -> str:
    if fields.get("outcome") == signals.EXECUTED and fields.get("stored") is not None:
        return " (stored)" if fields["stored"] else " (discarded)"
    if fields.get("source"):
        return f" ({fields['source']})"
    return ""


def _where(sender: object, fields: dict[str, Any]) -> str:
    if sender != "http":
        return str(sender)
    # No status: the view raised, and Django (not the library) answers the exception.
    status = fields.get("status") or "exception"
    return f"{fields.get('method')} {fields.get('route')} -> {status}"


def _timings(fields: dict[str, Any]) -> str:
    parts = [
        f", {name} {seconds * 1000:.1f} ms"
        for name, seconds in (
            ("claim", fields.get("claim_seconds")),
            ("waited", fields.get("waited_seconds")),
            ("total", fields.get("total_seconds")),
        )
        if seconds
    ]
    return "".join(parts)


__all__ = ["LEVELS", "connect", "logger", "on_entry_reclaimed", "on_outcome", "on_purge_finished"]
