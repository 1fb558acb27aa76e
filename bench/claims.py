"""The claim statement alone, as a first execution under "lease" sends it (autocommit).

For the scale and purge benchmarks, which time claims without a request around them.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

from idempotency_django._storage.store import pg
from idempotency_django._storage.store.sql import Claim, Existing, Found, Target

LEASE = timedelta(seconds=60)
TTL = timedelta(hours=24)
FINGERPRINT = "0" * 64


def claim(alias: str, tenant: str, key: str) -> Found:
    target = Target(alias, tenant, key, FINGERPRINT, LEASE, TTL)
    return pg.claim(target, uuid.uuid4(), relaxed=True, bounded=False)


def claim_new(alias: str, tenant: str, key: str) -> None:
    """Claim a key nobody holds; raises if the claim found something else."""
    found = claim(alias, tenant, key)
    if not isinstance(found, Claim):
        raise RuntimeError(f"a new key was not claimed: {found!r}")


def claim_existing(alias: str, tenant: str, key: str) -> None:
    """Claim a completed key (what a replay's claim does); raises if it found none."""
    found = claim(alias, tenant, key)
    if not isinstance(found, Existing):
        raise RuntimeError(f"expected an existing entry, the claim gave {found!r}")
