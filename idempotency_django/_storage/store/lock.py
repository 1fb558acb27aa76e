"""The lock protocol (PostgreSQL): the claim is the first statement of the view's transaction.

Nothing is committed before the answer is: the claim, the business writes and
the recorded answer commit together, or none of them does. A duplicate meets the
key's transaction-scoped advisory lock and gets its 409 at once rather than
queueing on the unique index; a crash is a plain rollback, so no abandoned claim
is left behind and the retry runs at once.
"""

from __future__ import annotations

import uuid

from idempotency_django._storage.store import pg
from idempotency_django._storage.store.sql import Claim, Found, Target, take_over

NAME = "lock"
CLAIMS_IN_TRANSACTION = True


def claim(target: Target, bounded: bool) -> Found:
    """Inside the open transaction: lock, insert, or show the existing row, in one statement."""
    return pg.claim(target, uuid.uuid4(), relaxed=False, bounded=bounded)


def hold(claim: Claim, target: Target, bounded: bool) -> bool:
    """Already held: the claim is this transaction's own uncommitted row (or takeover)."""
    return True


def release(claim: Claim) -> None:
    """Nothing to free: the rollback took the claim with it."""


__all__ = ["NAME", "claim", "hold", "release", "take_over"]
