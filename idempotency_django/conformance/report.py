"""The runner's output: a table for the terminal, JSON for a file."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from idempotency_django.conformance.scenarios import (
    ERROR,
    FAIL,
    NOT_RUN,
    PASS,
    TIMEOUT,
    UNPASSED,
    Result,
)

MARKS = {PASS: "PASS", FAIL: "FAIL", NOT_RUN: "----", TIMEOUT: "TIMEOUT", ERROR: "ERROR"}
ALWAYS = ((PASS, "passed"), (FAIL, "failed"), (NOT_RUN, "not run"))
WHEN_ANY = ((TIMEOUT, "timed out"), (ERROR, "runner errors"))


def table(results: Sequence[Result], width: int = 100) -> str:
    """One line per scenario (verdict, name, requests), its evidence indented below a failure."""
    name_width = max((len(r.name) for r in results), default=10)
    lines = [f"{'verdict':7}  {'scenario':{name_width}}  requests", "-" * (name_width + 19)]
    for result in results:
        lines.append(f"{MARKS[result.verdict]:7}  {result.name:{name_width}}  {result.requests:8}")
        shown = result.evidence if result.verdict in UNPASSED else result.evidence[-2:-1]
        shown = [*shown, *(f"warning: {warning}" for warning in result.warnings)]
        for line in shown:
            lines += textwrap.wrap(
                line,
                width,
                initial_indent="         ",
                subsequent_indent="           ",
                break_on_hyphens=False,  # a flag (--count-url) stays whole
            )
    lines.append(summary(results))
    return "\n".join(lines)


def summary(results: Sequence[Result]) -> str:
    """``3 passed, 1 failed, 6 not run``; timeouts, errors and warnings only when there are."""
    counts = {verdict: sum(r.verdict == verdict for r in results) for verdict in MARKS}
    parts = [f"{counts[verdict]} {word}" for verdict, word in ALWAYS]
    parts += [f"{counts[verdict]} {word}" for verdict, word in WHEN_ANY if counts[verdict]]
    warned = sum(len(r.warnings) for r in results)
    return ", ".join(parts + ([f"{warned} warnings"] if warned else []))


def as_json(url: str, results: Sequence[Result], profile: str = "strict") -> dict[str, Any]:
    return {
        "url": url,
        "profile": profile,
        "passed": not any(r.verdict in UNPASSED for r in results),
        "scenarios": [r.as_dict() for r in results],
    }


def write_json(path: Path, url: str, results: Sequence[Result], profile: str = "strict") -> None:
    path.write_text(json.dumps(as_json(url, results, profile), indent=2) + "\n")
