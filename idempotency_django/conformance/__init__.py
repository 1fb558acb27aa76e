"""Conformance: does an endpoint keep the Idempotency-Key contract? (docs/verify.rst)

``idempotency-conformance URL`` (or ``python -m idempotency_django.conformance URL``)
judges a live endpoint over HTTP; ``idempotency_django.testing.run_conformance`` runs
the same scenarios through Django's test client. :func:`conformance_hooks` lets an
endpoint offer the test hooks the scenarios for failures and in-flight duplicates need.
Lazy: importing this package imports neither Django nor an HTTP client, so that the
command starts at once and needs no Django settings (only the command line imports httpx).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from idempotency_django.conformance.hooks import conformance_hooks
    from idempotency_django.conformance.scenarios import (
        ERROR,
        FAIL,
        NAMES,
        NOT_RUN,
        PASS,
        TIMEOUT,
        Answer,
        Options,
        Result,
        Transport,
        run_scenarios,
    )

__all__ = [
    "ERROR",
    "FAIL",
    "NAMES",
    "NOT_RUN",
    "PASS",
    "TIMEOUT",
    "Answer",
    "Options",
    "Result",
    "Transport",
    "conformance_hooks",
    "run_scenarios",
]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(name)
    module = "hooks" if name == "conformance_hooks" else "scenarios"
    return getattr(import_module(f"idempotency_django.conformance.{module}"), name)
