"""The request and answer headers of this library's dialect the runner may send or read.

Apart from the scenarios and the hooks, so that the command line needs no Django to name them.
"""

from __future__ import annotations

FAIL_HEADER = "Idempotency-Test-Fail"
HOLD_HEADER = "Idempotency-Test-Hold"
MARKER_HEADER = "Idempotency-Test-Hook"
RETRY_HEADER = "Idempotency-Retry"  # how the Python client marks its retries
