"""What every optional receiver set shares: connecting its ``on_*`` methods to the signals."""

from __future__ import annotations

from typing import Any

from idempotency_django import signals


class SignalReceivers:
    """Subclasses define ``on_outcome``, ``on_entry_reclaimed``, ``on_purge_finished``
    and ``on_cache_failed``; ``connect()`` and ``disconnect()`` wire them up."""

    def connect(self) -> None:
        """Connect the receivers to the signals (again is harmless)."""
        for signal, receiver in self._receivers():
            signal.connect(receiver, weak=False, dispatch_uid=self._uid(receiver))

    def disconnect(self) -> None:
        for signal, receiver in self._receivers():
            signal.disconnect(dispatch_uid=self._uid(receiver))

    def _receivers(self) -> list[tuple[Any, Any]]:
        return [
            (signals.outcome, getattr(self, "on_outcome")),  # noqa: B009
            (signals.entry_reclaimed, getattr(self, "on_entry_reclaimed")),  # noqa: B009
            (signals.purge_finished, getattr(self, "on_purge_finished")),  # noqa: B009
            (signals.cache_failed, getattr(self, "on_cache_failed")),  # noqa: B009
        ]

    def _uid(self, receiver: Any) -> str:
        return f"{type(self).__module__}.{receiver.__name__}.{id(self)}"
