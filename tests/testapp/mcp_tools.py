"""MCP tools protected by ``idempotency_django.mcp.idempotent`` (``tests/test_mcp.py``)."""

from __future__ import annotations

import threading
from typing import Any

from mcp_server import MCPToolset

from idempotency_django.mcp import from_arguments, idempotent
from tests.testapp.models import Charge

# reference -> (entered, release): a held tool waits inside its transaction for the test.
held: dict[str, tuple[threading.Event, threading.Event]] = {}


class OrderTools(MCPToolset):  # type: ignore[misc]  # django-mcp-server is untyped
    @idempotent
    def create_order(
        self, reference: str, amount: int, idempotency_key: str, hold: bool = False
    ) -> dict[str, Any]:
        """Order ``amount`` units, recorded under ``reference``."""
        charge = Charge.objects.create(reference=reference, amount=amount)
        if hold:
            entered, release = held[reference]
            entered.set()
            assert release.wait(30), "the test never released the held tool"
        if amount < 0:
            raise ValueError("a failing tool")
        user = self.request.user
        return {"id": charge.pk, "caller": user.get_username() if user.is_authenticated else ""}

    @idempotent(key=from_arguments)
    def refund(self, reference: str, amount: int) -> int:
        """Refund ``amount`` under ``reference``."""
        return Charge.objects.create(reference=reference, amount=-amount).pk
