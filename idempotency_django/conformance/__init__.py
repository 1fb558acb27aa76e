"""Conformance: does an endpoint keep the Idempotency-Key contract? (docs/verify.rst)

``python -m idempotency_django.conformance URL`` judges a live endpoint over HTTP;
``idempotency_django.testing.run_conformance`` runs the same scenarios through
Django's test client. :func:`conformance_hooks` lets an endpoint offer the test hooks
the scenarios for failures and in-flight duplicates need. Importing this package
needs no HTTP client: only the command line imports httpx.
"""

from __future__ import annotations

from idempotency_django.conformance.hooks import conformance_hooks
from idempotency_django.conformance.scenarios import (
    FAIL,
    NAMES,
    NOT_RUN,
    PASS,
    Answer,
    Options,
    Result,
    Transport,
    run_scenarios,
)

__all__ = [
    "FAIL",
    "NAMES",
    "NOT_RUN",
    "PASS",
    "Answer",
    "Options",
    "Result",
    "Transport",
    "conformance_hooks",
    "run_scenarios",
]
