"""``python -m idempotency_django.conformance URL ...``: ``idempotency-conformance URL ...``."""

from __future__ import annotations

import sys

from idempotency_django.conformance.cli import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m idempotency_django.conformance"))
