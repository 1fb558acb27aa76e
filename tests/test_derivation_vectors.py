"""Known answers for the keys the seal and the replay cache derive: their labels are data.

A stored answer opens only under the key it was sealed with, and a cached value only
under its tag's key: a label that changes (0.5's file move rewrote them as module
paths, ``b"idempotency_django._storage.seal"``) makes every row and every cached
answer unreadable at the upgrade. The labels are words, not the modules' names.
"""

from __future__ import annotations

from idempotency_django._storage import cache, seal

KEY = bytes(range(32))


def test_a_seal_keys_id_is_the_one_0_5_stores() -> None:
    assert seal.key_id(KEY).hex() == "04a3bad3"


def test_a_roots_seal_subkey_is_the_one_0_5_derives() -> None:
    expected = "95e81c243683661465faa53505c4f43fd9ec647aa6e09a13940ed9913b5f15be"
    assert seal._subkey(KEY).hex() == expected


def test_the_replay_caches_value_key_is_the_one_0_5_derives() -> None:
    expected = "64dd43ceff0a2501fb22e8265ec939c1eb656e7fbd42aa0f77406648a5e468ec"
    assert cache._value_key(KEY).hex() == expected
