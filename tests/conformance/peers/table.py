"""The peers' table for docs/verify.rst, from run.sh's results: ``table.py WORK PEER...``.

Each PEER is run.sh's ``kind|package==version|flags|extra``; the results are
``WORK/<package>.<profile>.judged.json`` (judge.py's), and ``WORK/<package>.timings.tsv``.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

PROFILES = ("strict", "draft")
HOOKS = "needs the test hooks"
UUID = re.compile(r"([0-9a-f]{8})-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
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
    text = UUID.sub(lambda m: m.group(1) + "…", " ".join(text.split()))
    text = text.replace("|", "/").replace("*", "\\*").replace("`", "'")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def summary(judged: list[dict[str, Any]]) -> str:
    verdicts = [j["verdict"] for j in judged]
    count = {v: verdicts.count(v) for v in [*MARKS, *sorted(set(verdicts) - set(MARKS))]}
    agree = sum(j["agreement"] == "agree" for j in judged)
    shown = ", ".join(f"{n} {v}" for v, n in count.items() if n or v in MARKS)
    return f"{shown}; {agree}/{len(judged)} agree with the rows"


def cell(judged: list[dict[str, Any]], name: str) -> str:
    found = [j for j in judged if j["name"] == name]
    if not found:
        return "—"
    j = found[0]
    text = f"{MARKS.get(j['verdict'], j['verdict'])} ({j['created']})"
    return text if j["agreement"] == "agree" else f"**{text}: {j['agreement']}**"


def rows(j: dict[str, Any]) -> str:
    return f"{j['created']} created by {j['runs']} runs of the view, {j['calls']} requests"


def rests_on(j: dict[str, Any], draft: dict[str, Any] | None = None) -> str:
    counted = f"strict: {rows(j)}; draft: {rows(draft)}" if draft else f"rows: {rows(j)}"
    wrong = f"; wrong: {'; '.join(j['wrong'])}" if j["wrong"] else ""
    disagree = f" — **{j['agreement']}**" if j["agreement"] != "agree" else ""
    if draft and draft["agreement"] != "agree":
        disagree += f" (draft: **{draft['agreement']}**)"
    return f"{clean(j['reason'])} ({counted}{clean(wrong, 240)}){disagree}"


def shown(j: dict[str, Any]) -> bool:
    """Failures and disagreements; a ``not run`` unless it only lacks the test hooks."""
    if j["agreement"] != "agree" or j["verdict"] == "fail":
        return True
    return j["verdict"] != "pass" and HOOKS not in j["reason"]


def numbers(text: str) -> str:
    """The text without its ids, keys and counts: what two runs' reasons share."""
    return re.sub(r"\d+", "#", UUID.sub("", text))


def explained(runs: dict[str, list[dict[str, Any]]]) -> list[str]:
    """One line per verdict other than a pass (one for both profiles when they agree)."""
    strict = {j["name"]: j for j in runs["strict"]}
    lines = []
    for draft in runs["draft"]:
        first = strict.get(draft["name"])
        same = first is not None and (first["verdict"], numbers(first["reason"])) == (
            draft["verdict"],
            numbers(draft["reason"]),
        )
        if first is not None and shown(first):
            label = "strict and draft" if same else "strict"
            lines.append(
                f"* ``{first['name']}`` ({label}): {rests_on(first, draft if same else None)}"
            )
        if shown(draft) and not same:
            lines.append(f"* ``{draft['name']}`` (draft): {rests_on(draft)}")
    return lines


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
    names = list(dict.fromkeys(j["name"] for r in runs.values() for p in PROFILES for j in r[p]))
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
        out += [*explained(runs[spec]), ""]
    print("\n".join(out))


if __name__ == "__main__":
    main(sys.argv[1:])
