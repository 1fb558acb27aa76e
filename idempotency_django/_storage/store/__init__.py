"""Every SQL statement the protocols issue: ``sql`` (shared), ``lease`` and ``lock``.

A protocol module has ``NAME``, ``CLAIMS_IN_TRANSACTION`` and ``claim``,
``take_over``, ``hold``, ``release``; :mod:`idempotency_django._protocol.execution` picks
one per request and drives it.
"""

from __future__ import annotations

from types import ModuleType

from idempotency_django._storage.store import lease, lock
from idempotency_django._storage.store.sql import table

PROTOCOLS: dict[str, ModuleType] = {lease.NAME: lease, lock.NAME: lock}

__all__ = ["PROTOCOLS", "lease", "lock", "table"]
