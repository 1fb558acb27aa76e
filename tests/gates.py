"""In-process gates: a view waits at one, inside its transaction, until the test opens it.

A test that must act while a request is inside its view (its write done, its commit
not) arms a gate for the request's key, sends the request from a thread with
``"hold": true`` in its body, waits for ``arrived``, acts, then opens the gate: no
sleep and no "long enough", so a slow machine changes nothing. Only the first
request of the key to arrive waits; a duplicate that wrongly runs passes through
(and the test's own assertions then see it).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

_armed: dict[str, Gate] = {}
_lock = threading.Lock()


@dataclass
class Gate:
    arrived: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)
    taken: bool = False

    def wait_arrival(self, within: float = 300) -> None:
        """Until the request waits at the gate (``within`` only bounds a broken run)."""
        assert self.arrived.wait(within), "no request reached the gate"


def hold_here(name: str) -> None:
    """Called by a view: the first request to arrive at ``name``'s armed gate waits there."""
    with _lock:
        gate = _armed.get(name)
        if gate is None or gate.taken:
            return
        gate.taken = True
    gate.arrived.set()
    gate.released.wait(300)


@contextmanager
def armed(name: str) -> Iterator[Gate]:
    """A gate for ``name`` (a request's key), opened when the block ends, however it ends."""
    gate = Gate()
    with _lock:
        _armed[name] = gate
    try:
        yield gate
    finally:
        gate.released.set()
        with _lock:
            _armed.pop(name, None)
