"""The outbox's panel on the admin's overview (:mod:`idempotency_django._operations.overview`):
rows pending, the oldest one's age, dead letters waiting, each linked to its list.

Registered by the outbox app's ``ready()``: the core imports no feature app.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.http import HttpRequest

from idempotency_django._operations.overview import Panel, changelist_url, model_admin_for
from idempotency_django.outbox import delivery
from idempotency_django.outbox.models import OutboxMessage

if TYPE_CHECKING:
    from django.contrib.admin import AdminSite


def panel(request: HttpRequest, site: AdminSite) -> Panel | None:
    """The outbox's figures, for a user whose admin may view outbox messages."""
    from idempotency_django.admin import listed_alias  # the admin, loaded only for its pages

    model_admin = model_admin_for(request, site, OutboxMessage)
    if model_admin is None:
        return None
    stats = delivery.stats(listed_alias(request, OutboxMessage))
    return Panel(
        "outbox",
        "Outbox",
        [
            ("pending", stats.pending, "", changelist_url(model_admin, "state=pending")),
            ("oldest pending", stats.oldest_pending_seconds, " s", None),
            ("dead letters waiting", stats.dead, "", changelist_url(model_admin, "state=dead")),
        ],
    )
