"""The peers' table for docs/verify.rst, from run.sh's results: ``table.py WORK PEER...``.

Each PEER is run.sh's ``kind|package==version|flags|extra``; the results are
``WORK/<package>.<profile>.judged.json`` (judge.py's), and ``WORK/<package>.timings.tsv``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

PROFILES = ("strict", "draft")
MARKS = {"pass": "pass", "fail": "FAIL", "not run": "not run"}
KINDS = {
    "django": "Django (DRF, gunicorn)",
    "asgi": "FastAPI (uvicorn)",
    "express": "Express 4",
    "nest": "NestJS 10 (Express)",
}


def load(work: Path, name: str, profile: str) -> list[dict[str, Any]]:
    path = work / f"{name.lstrip('@').replace('/', '-')}.{profile}.judged.json"
    return json.loads(path.read_text()) if path.exists() else []


def timings(work: Path) -> dict[tuple[str, str], tuple[str, str]]:
    """(spec, profile) -> (setup seconds, run seconds)."""
    rows = [
        line.split("\t") for p in work.glob("*.timings.tsv") for line in p.read_text().splitlines()
    ]
    return {(r[0], r[1]): (r[2], r[3]) for r in rows if len(r) > 3}


def clean(text: str, limit: int = 200) -> str:
    text = " ".join(text.split()).replace("|", "/").replace("*", "\\*").replace("`", "'")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def summary(judged: list[dict[str, Any]]) -> str:
    count = {v: sum(j["verdict"] == v for j in judged) for v in MARKS}
    agree = sum(j["agreement"] == "agree" for j in judged)
    return (
        f"{count['pass']} pass, {count['fail']} fail, {count['not run']} not run; "
        f"{agree}/{len(judged)} agree with the rows"
    )


def cell(judged: list[dict[str, Any]], name: str) -> str:
    found = [j for j in judged if j["name"] == name]
    if not found:
        return "?"
    j = found[0]
    text = f"{MARKS[j['verdict']]} ({j['created']})"
    return text if j["agreement"] == "agree" else f"**{text}: {j['agreement']}**"


def rests_on(j: dict[str, Any]) -> str:
    rows = f"rows: {j['created']} created, {j['runs']} runs of the view, {j['calls']} requests"
    wrong = f"; wrong: {'; '.join(j['wrong'])}" if j["wrong"] else ""
    disagree = f" — **{j['agreement']}**" if j["agreement"] != "agree" else ""
    return f"{clean(j['reason'])} ({rows}{clean(wrong, 240)}){disagree}"


def main(argv: list[str]) -> None:
    work, peers = Path(argv[0]), [p.split("|") for p in argv[1:]]
    times = timings(work)
    runs = {
        spec: {p: load(work, spec.split("==")[0], p) for p in PROFILES} for _, spec, _, _ in peers
    }
    peers = [p for p in peers if any(runs[p[1]].values())]
    out = [".. list-table::", "   :header-rows: 1", ""]
    out += ["   * - package", "     - app", "     - runner flags", "     - profile"]
    out += ["     - verdicts, and their agreement with the rows", "     - run (setup)"]
    for kind, spec, flags, _ in peers:
        for profile in PROFILES:
            setup, took = times.get((spec, profile), ("?", "?"))
            out += [f"   * - ``{spec}``", f"     - {KINDS[kind]}"]
            out += [f"     - {f'``{flags}``' if flags else '—'}", f"     - {profile}"]
            out += [f"     - {summary(runs[spec][profile])}", f"     - {took} s ({setup} s)"]
    names = [j["name"] for j in runs[peers[0][1]]["strict"]]
    out += ["", ".. list-table:: strict / draft (rows created)", "   :header-rows: 1", ""]
    out += ["   * - scenario"] + [f"     - ``{spec.split('==')[0]}``" for _, spec, _, _ in peers]
    for name in names:
        out.append(f"   * - ``{name}``")
        for _, spec, _, _ in peers:
            strict, draft = (cell(runs[spec][p], name) for p in PROFILES)
            out.append(f"     - {strict} / {draft}")
    out.append("")
    for _, spec, _, _ in peers:
        out += [f"``{spec}``, what each verdict other than a pass rests on:", ""]
        for profile in PROFILES:
            for j in runs[spec][profile]:
                if j["verdict"] != "pass" or j["agreement"] != "agree":
                    out.append(f"* ``{j['name']}`` ({profile}): {rests_on(j)}")
        out.append("")
    print("\n".join(out))


if __name__ == "__main__":
    main(sys.argv[1:])
