"""Judge the runner's verdicts against the effects a peer app recorded, scenario by scenario.

``judge.py DSN REPORT STAMPS PROFILE [OUT [STDERR]]``: REPORT is the runner's ``--json``, STAMPS
``stamp.py``'s times, DSN the peer's database, whose ``charges`` (one row per run of the
view) and ``calls`` (one row per request answered, written by the app's outermost layer)
were written by the app, never by the runner. Each scenario's rows are those that arrived
between its stamp and the next. What the rows show wrong:

- a run under a (caller, key) that had already run and created (a double execution);
- a run that created under a (caller, key) after its earlier run's answer was replayed
  (the key was taken, then ran another request: the hidden execution behind a replay);
- under ``strict``, a run that created for a request without a key, or with the oversized
  or non-ASCII key of the ``key-*-400`` scenarios (the contract: 400, nothing runs);
- a run that created, named by no answer (an execution hidden behind another answer);
- an answer that names what another caller's request created (a leak).

The verdict must agree: nothing wrong, and a pass, a ``not run`` or a failure for a reason
that claims no execution and no leak; something wrong, and a failure whose reason says it
(an execution, or the other caller's answer). Else: ``false pass``, ``missed`` (not run
over a wrong effect), ``wrong reason``, ``false fail``. When the runner counted effects
(``N effects counted``), the rows that created must number the same, else ``count
differs``; a run that left no report (STDERR has its last words) is ``no report``, a
scenario whose start was not noted ``unstamped``. Writes the judged scenarios to OUT (JSON)
and exits 1 on any disagreement.
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

AGREE = "agree"
CLAIMS_RUN = re.compile(r"execut|ran the view|ran under|something ran|created in between|ran again")
CLAIMS_LEAK = re.compile(r"first caller's answer")
COUNTED = re.compile(r"^(\d+) effects counted")
BAD_KEYS = {  # the strict key-*-400 scenarios: which key no request may run under
    "key-missing-400": lambda key: key is None,
    "key-oversized-400": lambda key: key is not None and len(key) >= 300,
    "key-non-ascii-400": lambda key: key is not None and not key.isascii(),
}


@dataclass(frozen=True)
class Run:
    """A row of ``charges``: the view ran (status 201 created, 400 refused the body)."""

    id: int
    key: str | None
    caller: str
    status: int
    at: float


@dataclass(frozen=True)
class Call:
    """A row of ``calls``: a request answered, and the id its answer names."""

    key: str | None
    caller: str
    status: int
    answer_id: int | None
    at: float


@dataclass
class Judged:
    name: str
    verdict: str
    reason: str
    created: int
    runs: int
    calls: int
    counted: int | None
    wrong: list[str] = field(default_factory=list)
    agreement: str = AGREE

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def wrong_effects(
    name: str, profile: str, runs: Sequence[Run], calls: Sequence[Call], every: Sequence[Run]
) -> list[str]:
    """What the rows of one scenario show wrong (``every``: the whole run's, for leaks)."""
    found: list[str] = []
    by_key: dict[tuple[str, str | None], list[Run]] = defaultdict(list)
    for run in sorted(runs, key=lambda r: r.at):
        by_key[run.caller, run.key].append(run)
    for (_, key), mine in by_key.items():
        if key is None:
            continue
        created = [r for r in mine if r.status == 201]
        if len(created) > 1:
            found.append(f"key {key!r} ran and created {len(created)} times")
        elif created and replayed_before(mine, created[0], calls):
            found.append(f"key {key!r} created after its earlier answer was replayed")
    rule = BAD_KEYS.get(name)
    if profile == "strict" and rule is not None:
        bad = [r for r in runs if r.status == 201 and rule(r.key)]
        if bad:
            found.append(f"{len(bad)} request(s) with the scenario's bad key ran and created")
    owners = {r.id: r.caller for r in every}
    leaked = [
        c
        for c in calls
        if 200 <= c.status < 300 and c.answer_id in owners and owners[c.answer_id] != c.caller
    ]
    found += [f"a caller got the answer of another caller's run {c.answer_id}" for c in leaked]
    # A run hidden behind another caller's answer is that leak, not another wrong.
    leaked_to = {(c.caller, c.key) for c in leaked}
    named = {c.answer_id for c in calls} | {r.id for r in runs if (r.caller, r.key) in leaked_to}
    hidden = [r.id for r in runs if r.status == 201 and r.id not in named]
    if hidden:
        found.append(f"run(s) {hidden} created, and no answer named them")
    return found


def replayed_before(mine: Sequence[Run], created: Run, calls: Iterable[Call]) -> bool:
    """Was an earlier run's answer under this (caller, key) replayed before ``created`` ran?"""
    earlier = [r for r in mine if r.at < created.at]
    if not earlier:
        return False
    last = earlier[-1]
    return any(
        c.caller == created.caller
        and c.key == created.key
        and last.at < c.at < created.at
        and c.status == last.status
        for c in calls
    )


def judge_one(result: dict[str, Any], wrong: list[str], created: int) -> str:
    verdict, evidence = result["verdict"], result["evidence"]
    reason = evidence[-2] if verdict == "fail" and len(evidence) > 1 else ""
    claims_run, claims_leak = bool(CLAIMS_RUN.search(reason)), bool(CLAIMS_LEAK.search(reason))
    counted = runner_count(evidence)
    if wrong:
        leak = any("another caller" in w for w in wrong)
        ran = any("another caller" not in w for w in wrong)
        if verdict == "pass":
            return "false pass"
        if verdict != "fail":
            return "missed"
        if (ran and not claims_run) or (leak and not claims_leak):
            return "wrong reason"
    elif verdict == "fail" and (claims_run or claims_leak):
        return "false fail"
    if counted is not None and counted != created:
        return "count differs"
    return AGREE


def runner_count(evidence: Sequence[str]) -> int | None:
    found = [int(m.group(1)) for line in evidence if (m := COUNTED.match(line))]
    return found[-1] if found else None


def window(rows: Sequence[Any], start: float, end: float) -> list[Any]:
    return [r for r in rows if start <= r.at < end]


def judge(
    report: dict[str, Any],
    stamps: Sequence[tuple[str, float]],
    runs: Sequence[Run],
    calls: Sequence[Call],
) -> list[Judged]:
    """Every scenario of ``report`` against the rows between its stamps."""
    profile = report.get("profile", "strict")
    bounds = {name: (start, stamps[i + 1][1]) for i, (name, start) in enumerate(stamps[:-1])}
    judged = []
    for result in report["scenarios"]:
        name = result["name"]
        if name not in bounds:
            why = "stamp.py noted no start for it: has the runner's progress line changed?"
            judged.append(
                Judged(name, result["verdict"], why, 0, 0, 0, None, agreement="unstamped")
            )
            continue
        start, end = bounds[name]
        mine, theirs = window(runs, start, end), window(calls, start, end)
        created = sum(r.status == 201 for r in mine)
        wrong = wrong_effects(name, profile, mine, theirs, runs)
        evidence = result["evidence"]
        one = Judged(
            name=name,
            verdict=result["verdict"],
            reason=evidence[-2] if len(evidence) > 1 else "",
            created=created,
            runs=len(mine),
            calls=len(theirs),
            counted=runner_count(evidence),
            wrong=wrong,
        )
        one.agreement = judge_one(result, wrong, created)
        judged.append(one)
    return judged


def read_rows(dsn: str) -> tuple[list[Run], list[Call]]:
    import psycopg

    with psycopg.connect(dsn) as conn:
        runs = [
            Run(*row) for row in conn.execute("SELECT id, key, caller, status, at FROM charges")
        ]
        sql = "SELECT key, caller, status, answer_id, at FROM calls"
        calls = [Call(*row) for row in conn.execute(sql)]
    return runs, calls


def no_report(stderr: Path) -> list[Judged]:
    """The runner ended without its JSON: one row saying so, with its last words."""
    lines = stderr.read_text().splitlines() if stderr.exists() else []
    last = lines[-1] if lines else "no output"
    reason = f"the runner wrote no report: {last}"
    return [Judged("(the run)", "no report", reason, 0, 0, 0, None, agreement="no report")]


def main(argv: list[str]) -> int:
    """``DSN REPORT STAMPS PROFILE [OUT [STDERR]]``: exit 1 on any disagreement."""
    dsn, report_path, stamps_path, profile = argv[:4]
    stderr = Path(argv[5]) if len(argv) > 5 else Path(report_path).with_suffix(".err")
    if Path(report_path).exists():
        report = json.loads(Path(report_path).read_text())
        report.setdefault("profile", profile)
        stamps = [(name, at) for name, at in json.loads(Path(stamps_path).read_text())]
        runs, calls = read_rows(dsn)
        judged = judge(report, stamps, runs, calls)
    else:
        judged = no_report(stderr)
    if len(argv) > 4:
        Path(argv[4]).write_text(json.dumps([j.as_dict() for j in judged], indent=2) + "\n")
    bad = [j for j in judged if j.agreement != AGREE]
    for j in bad:
        print(
            f"DISAGREE {j.name}: {j.agreement}: verdict {j.verdict} ({j.reason[:160]}); "
            f"rows: {j.created} created, {j.runs} runs, {j.calls} calls; wrong: {j.wrong}"
        )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
