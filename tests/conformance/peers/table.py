"""The peers' table for docs/verify.rst, from run.sh's results: ``table.py WORK PEER...``.

Each PEER is run.sh's ``package==version|flags|extra``; the results are
``WORK/<package>.<profile>.json`` as ``--json`` writes them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

PROFILES = ("strict", "draft")
MARKS = {"pass": "pass", "fail": "**fail**", "not run": "not run"}


def load(work: Path, name: str, profile: str) -> dict[str, Any] | None:
    path = work / f"{name}.{profile}.json"
    return json.loads(path.read_text()) if path.exists() else None


def reason(scenario: dict[str, Any]) -> str:
    """What the verdict rests on: the failure or skip's reason, else the last note."""
    evidence = [line for line in scenario["evidence"] if line]
    text = evidence[-2] if len(evidence) > 1 else ""
    return text.replace("|", "/").replace("*", "\\*").replace("`", "'")[:300]


def verdict(scenario: dict[str, Any]) -> str:
    mark = MARKS[scenario["verdict"]]
    warned = len(scenario.get("warnings", []))
    return f"{mark} ({warned} warnings)" if warned else mark


def section(work: Path, spec: str, flags: str) -> list[str]:
    name = spec.split("==")[0]
    runs = {profile: load(work, name, profile) for profile in PROFILES}
    lines = [f"``{spec}``", "~" * (len(spec) + 4), ""]
    lines.append(f"Flags: ``{flags}``." if flags else "Flags: none beyond the common ones.")
    lines += ["", ".. list-table::", "   :header-rows: 1", "   :widths: 18 14 14 54", ""]
    lines += ["   * - scenario", "     - strict", "     - draft", "     - rests on (strict)"]
    strict, draft = runs["strict"], runs["draft"]
    if strict is None or draft is None:
        return [*lines, "   * - (no results)", "     -", "     -", "     -", ""]
    by_name = {s["name"]: s for s in draft["scenarios"]}
    for scenario in strict["scenarios"]:
        other = by_name[scenario["name"]]
        rests = reason(scenario)
        warnings = "; ".join(other.get("warnings", []))[:200]
        if warnings:
            rests += f" — draft warnings: {warnings.replace('|', '/')}"
        lines += [
            f"   * - ``{scenario['name']}``",
            f"     - {verdict(scenario)}",
            f"     - {verdict(other)}",
            f"     - {rests}",
        ]
    return [*lines, ""]


def main(argv: list[str]) -> None:
    work, peers = Path(argv[0]), argv[1:]
    out: list[str] = []
    for peer in peers:
        spec, flags, _ = peer.split("|")
        out += section(work, spec, flags)
    print("\n".join(out))


if __name__ == "__main__":
    main(sys.argv[1:])
