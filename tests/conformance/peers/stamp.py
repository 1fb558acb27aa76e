"""Run the conformance runner's command line, stamping when each scenario starts.

``stamp.py STAMPS -- ARGS...`` runs ``python -m idempotency_django.conformance ARGS...`` in
this process, unchanged but for its standard error: each progress line (a scenario's name
as it starts) is written through with the time it was written, and the times go to STAMPS
(JSON: ``[[name, epoch seconds], ...]``, ending with ``["end", t]``). The judge cuts the
rows an app recorded at these times: every request of a scenario is sent after its stamp
and answered before the next one.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from idempotency_django.conformance import cli
from idempotency_django.conformance.scenarios import NAMES


class Stamped:
    """A text stream that notes when a line naming a scenario was written to it."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.stamps: list[tuple[str, float]] = []
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        now = time.time()
        first = text.split(" ", 1)[0].rstrip(":")
        with self._lock:
            if first in NAMES and not any(name == first for name, _ in self.stamps):
                self.stamps.append((first, now))
        return self.stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def main(argv: list[str]) -> int:
    path, args = Path(argv[0]), argv[argv.index("--") + 1 :]
    stamped = Stamped(sys.stderr)
    sys.stderr = stamped  # a TextIO in all but name
    try:
        status = cli.main(args)
    finally:
        sys.stderr = stamped.stream
        path.write_text(json.dumps([*stamped.stamps, ("end", time.time())]) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
