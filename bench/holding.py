"""A request that holds its key (in flight, inside its claim's transaction) so that duplicates get 409.

The held view (``bench.views.held``) makes its business write, creates
``<release>.entered``, then waits until ``<release>`` exists. A holder is renewed
(released, and a new key held) every ``RENEW`` seconds, well inside the lease
and ``IDEMPOTENCY_IDLE_TIMEOUT``, either of which would end a longer hold.
"""

from __future__ import annotations

import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

RENEW = 20.0
# post(path, key, release file) -> HTTP status; runs in the holder's thread.
Post = Callable[[str, str, str], int]


class Holder:
    def __init__(self, path: str, post: Post, after: Callable[[], None] | None = None) -> None:
        self.path, self.post, self.after = path, post, after
        self.folder = Path(tempfile.mkdtemp(prefix="idem-bench-hold-"))
        self.release: Path | None = None
        self.thread: threading.Thread | None = None
        self.since = 0.0
        self.current = ""
        self.statuses: list[int] = []

    def key(self) -> str:
        """A key held right now (renewed when it has been held for ``RENEW`` seconds)."""
        if self.thread is None or time.monotonic() - self.since > RENEW:
            self.stop()
            self._start()
        return self.current

    def _start(self) -> None:
        self.current = str(uuid.uuid4())
        release = self.release = self.folder / self.current
        entered = Path(f"{release}.entered")

        def hold() -> None:
            try:
                self.statuses.append(self.post(self.path, self.current, str(release)))
            finally:
                if self.after is not None:
                    self.after()

        self.thread = threading.Thread(target=hold, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not entered.exists():
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError(f"the held request to {self.path} never started")
            time.sleep(0.002)
        self.since = time.monotonic()

    def stop(self) -> None:
        if self.thread is None or self.release is None:
            return
        self.release.touch()
        self.thread.join(60)
        self.thread = None
        if self.statuses and self.statuses[-1] != 201:
            raise RuntimeError(f"the held request to {self.path} answered {self.statuses[-1]}")
