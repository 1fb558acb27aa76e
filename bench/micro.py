"""The replay cache's and the receivers' own work, timed alone in a loop (no request around).

A request's latency varies by far more than these parts cost, so besides the
request-level differences the table shows what each costs by itself:

- the cache: a GET that misses plus the SET of one answer, with main's
  ``cache.py`` and with this one (outside a request, so the SET is immediate);
- the receivers: one ``outcome`` signal as a first execution sends it, with
  the default log receiver alone and with the measured receivers connected.
"""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from types import ModuleType

from bench.measure import Sample, timed
from bench.receivers import Receivers
from idempotency_django import signals
from idempotency_django._protocol.responses import StoredResponse
from idempotency_django._storage import cache
from idempotency_django._storage.seal import Sealed

ANSWER = StoredResponse(
    201,
    [("Content-Type", "application/json"), ("Location", "/charges/1")],
    b'{"id": 1, "amount": 100}',
    "Created",
)
# What the replay cache now stores: the entry's sealed blob (about the answer's size, plus 33).
SEALED = Sealed(201, "Created", bytes(33) + ANSWER.body + json.dumps(ANSWER.headers).encode())
TTL = timedelta(minutes=5)
FIELDS = {
    "outcome": signals.EXECUTED,
    "method": "POST",
    "route": "bench.views.lock",
    "status": 201,
    "stored": True,
    "source": None,
    "protocol": "lock",
    "claim_seconds": 0.0003,
    "waited_seconds": 0.0,
    "total_seconds": 0.002,
    "key_digest": "0123456789ab",
}


def cache_samples(alias: str) -> dict[str, Sample]:
    return {
        "ops_cache_now": _cache_ops(cache, alias, "default"),
        "ops_cache_now_get": lambda: timed(
            lambda: cache.get(alias, "default", "", str(uuid.uuid4()))
        ),
    }


def _cache_ops(module: ModuleType, alias: str, *database: str) -> Sample:
    """One miss and one write through ``module`` (0.4's also names the entries' database)."""

    def sample() -> float:
        key = str(uuid.uuid4())

        def work() -> None:
            if module.get(alias, *database, "", key) is not None:
                raise RuntimeError("a new key was found in the cache")
            module.put(
                alias,
                *database,
                "",
                key,
                "f" * 64,
                SEALED,
                TTL,
            )

        return timed(work)

    return sample


def signal_samples(receivers: Receivers) -> dict[str, Sample]:
    samples = {"ops_signal_quiet": _send, "ops_signal_observed": _observed(receivers)}
    if len(receivers.toggles) > 1:
        for index in range(len(receivers.toggles)):
            samples[f"ops_signal_only_{index}"] = _observed(receivers.one(index))
    return samples


def _observed(receivers: Receivers) -> Sample:
    def sample() -> float:
        receivers.connect()
        try:
            with receivers.around():
                return _send()
        finally:
            receivers.disconnect()

    return sample


def _send() -> float:
    return timed(lambda: signals.send(signals.outcome, sender="http", **FIELDS))
