"""Claim latency against a table of 10,000,000 entries, next to an empty one.

Two scratch databases on the same server, claimed in alternation by the same
process: the claim statement of a new key (the first execution's claim) and of an
existing key (a replay's claim: a random one of the loaded entries; at 0 rows,
one this sweep just claimed).
"""

from __future__ import annotations

import hashlib
import random
import uuid

from bench.claims import claim_existing, claim_new
from bench.measure import Series, sweep, timed

EMPTY, LOADED = "default", "scale"


class Claims:
    def __init__(self, loaded_rows: int) -> None:
        self.loaded_rows = loaded_rows
        self.recent = [self._claim_new(EMPTY)[1] for _ in range(100)]

    def _claim_new(self, alias: str) -> tuple[float, str]:
        key = str(uuid.uuid4())
        elapsed = timed(lambda: claim_new(alias, "7", key))
        return elapsed, key

    def new_empty(self) -> float:
        elapsed, key = self._claim_new(EMPTY)
        self.recent[random.randrange(len(self.recent))] = key
        return elapsed

    def new_loaded(self) -> float:
        return self._claim_new(LOADED)[0]

    def existing_empty(self) -> float:
        key = random.choice(self.recent)
        return timed(lambda: claim_existing(EMPTY, "7", key))

    def existing_loaded(self) -> float:
        # The loaded rows' keys are md5(i) as a UUID, tenant i % 1000 (bench.scratch).
        i = random.randint(1, self.loaded_rows)
        key, tenant = str(uuid.UUID(_md5(str(i)))), str(i % 1000)
        return timed(lambda: claim_existing(LOADED, tenant, key))


def _md5(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()


def run(loaded_rows: int, rounds: int, per_round: int) -> dict[str, Series]:
    claims = Claims(loaded_rows)
    return sweep(
        {
            "claim_new_0": claims.new_empty,
            "claim_new_loaded": claims.new_loaded,
            "claim_existing_0": claims.existing_empty,
            "claim_existing_loaded": claims.existing_loaded,
        },
        rounds,
        per_round,
    )
