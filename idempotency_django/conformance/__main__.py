"""``python -m idempotency_django.conformance URL ...``: judge a live endpoint (docs/verify.rst)."""

from __future__ import annotations

import sys

from idempotency_django.conformance.cli import main

if __name__ == "__main__":
    sys.exit(main())
