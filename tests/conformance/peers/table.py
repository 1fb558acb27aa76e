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
MARKS = {"pass": "pass", "fail": "FAIL", "not run": "not run"}


def load(work: Path, name: str, profile: str) -> dict[str, Any]:
    path = work / f"{name}.{profile}.json"
    return json.loads(path.read_text()) if path.exists() else {"scenarios": []}


def clean(text: str, limit: int = 220) -> str:
    text = " ".join(text.split()).replace("|", "/").replace("*", "\\*").replace("`", "'")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def rests_on(scenario: dict[str, Any]) -> str:
    """The failure or skip's reason, with the effects counted when it does not say them."""
    evidence = scenario["evidence"]
    reason = evidence[-2] if len(evidence) > 1 else ""
    counts = [e for e in evidence[:-2] if "effects counted" in e]
    if counts and "effects counted" not in reason:
        reason += f" ({counts[-1]})"
    return clean(reason)


def summary(scenarios: list[dict[str, Any]]) -> str:
    count = {v: sum(s["verdict"] == v for s in scenarios) for v in MARKS}
    warned = sum(len(s.get("warnings", [])) for s in scenarios)
    text = f"{count['pass']} pass, {count['fail']} fail, {count['not run']} not run"
    return text + (f", {warned} warnings" if warned else "")


def main(argv: list[str]) -> None:
    work, peers = Path(argv[0]), [p.split("|") for p in argv[1:]]
    runs = {spec: {p: load(work, spec.split("==")[0], p) for p in PROFILES} for spec, _, _ in peers}
    out = [".. list-table::", "   :header-rows: 1", ""]
    out += ["   * - package", "     - runner flags", "     - strict", "     - draft"]
    for spec, flags, _ in peers:
        strict, draft = (runs[spec][p]["scenarios"] for p in PROFILES)
        out += [f"   * - ``{spec}``", f"     - {f'``{flags}``' if flags else '—'}"]
        out += [f"     - {summary(strict)}", f"     - {summary(draft)}"]
    names = [s["name"] for s in runs[peers[0][0]]["strict"]["scenarios"]]
    out += ["", ".. list-table:: strict / draft", "   :header-rows: 1", ""]
    out += ["   * - scenario"] + [f"     - ``{spec.split('==')[0]}``" for spec, _, _ in peers]
    for name in names:
        out.append(f"   * - ``{name}``")
        for spec, _, _ in peers:
            marks = []
            for profile in PROFILES:
                found = [s for s in runs[spec][profile]["scenarios"] if s["name"] == name]
                marks.append(MARKS[found[0]["verdict"]] if found else "?")
            out.append(f"     - {' / '.join(marks)}")
    out.append("")
    for spec, _, _ in peers:
        out += [f"``{spec}``, what each verdict other than a pass rests on:", ""]
        draft = {s["name"]: s for s in runs[spec]["draft"]["scenarios"]}
        for scenario in runs[spec]["strict"]["scenarios"]:
            other = draft.get(scenario["name"])
            if scenario["verdict"] != "pass":
                out.append(f"* ``{scenario['name']}`` (strict): {rests_on(scenario)}")
            if other and other["verdict"] != "pass" and rests_on(other) != rests_on(scenario):
                out.append(f"* ``{scenario['name']}`` (draft): {rests_on(other)}")
        out.append("")
    print("\n".join(out))


if __name__ == "__main__":
    main(sys.argv[1:])
