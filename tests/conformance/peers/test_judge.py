"""The peers tier's judge: the runner's verdicts against the rows an app recorded itself."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.peers import stamp
from tests.conformance.peers.judge import Call, Run, judge, judge_one, wrong_effects
from tests.conformance.peers.judge import main as judge_main

RECORDED = Path(__file__).parent / "recorded"
A, B = "Token a", "Token b"


def result(verdict: str, reason: str = "", counted: int | None = None) -> dict[str, Any]:
    evidence = [f"{counted} effects counted"] if counted is not None else []
    return {"name": "replay", "verdict": verdict, "evidence": [*evidence, reason, "1 requests"]}


def runs(*rows: tuple[str | None, str, int, float]) -> list[Run]:
    return [Run(i + 1, key, who, status, at) for i, (key, who, status, at) in enumerate(rows)]


def answered(rows: list[Run]) -> list[Call]:
    """Each run's own answer, naming what it created."""
    named = [(r, r.id if r.status == 201 else None) for r in rows]
    return [Call(r.key, r.caller, r.status, ident, r.at - 0.01) for r, ident in named]


def test_a_pass_over_a_key_that_ran_twice_is_a_false_pass() -> None:
    rows = runs(("k", A, 201, 1.0), ("k", A, 201, 2.0))
    wrong = wrong_effects("replay", "draft", rows, answered(rows), rows)
    assert wrong == ["key 'k' ran and created 2 times"]
    assert judge_one(result("pass"), wrong, 2) == "false pass"
    assert judge_one(result("not run", "needs hooks"), wrong, 2) == "missed"
    assert judge_one(result("fail", "the retry executed again (new id 2)"), wrong, 2) == "agree"
    assert judge_one(result("fail", "the retry is not problem+json"), wrong, 2) == "wrong reason"


def test_a_failure_claiming_an_execution_over_clean_rows_is_a_false_fail() -> None:
    rows = runs(("k", A, 201, 1.0), ("j", A, 201, 2.0))
    assert wrong_effects("storm", "strict", rows, answered(rows), rows) == []
    claim = "the storm: the ids jumped from 1 to 9: 6 created in between where 4 should have been"
    assert judge_one(result("fail", claim), [], 2) == "false fail"
    assert judge_one(result("fail", "a 409 that is not problem+json"), [], 2) == "agree"
    assert judge_one(result("pass"), [], 2) == "agree"


def test_the_runners_count_must_be_the_rows_count() -> None:
    assert judge_one(result("pass", "", counted=3), [], 3) == "agree"
    assert judge_one(result("pass", "", counted=2), [], 3) == "count differs"


def test_an_answer_naming_another_callers_run_is_a_leak() -> None:
    rows = runs(("k", A, 201, 1.0))
    calls = [Call("k", A, 201, 1, 0.9), Call("k", B, 201, 1, 1.5)]
    wrong = wrong_effects("other-caller", "draft", rows, calls, rows)
    assert wrong == ["a caller got the answer of another caller's run 1"]
    assert judge_one(result("pass"), wrong, 1) == "false pass"
    assert judge_one(
        result("fail", "the other caller got the first caller's answer"), wrong, 1
    ) == ("agree")
    refused = [Call("k", A, 201, 1, 0.9), Call("k", B, 409, None, 1.5)]
    assert wrong_effects("other-caller", "draft", rows, refused, rows) == []


def test_a_run_behind_a_leaked_answer_is_the_leak() -> None:
    """The other caller's request ran, and got the first caller's answer: one wrong."""
    rows = runs(("k", A, 201, 1.0), ("k", B, 201, 2.0))
    calls = [Call("k", A, 201, 1, 0.9), Call("k", B, 201, 1, 1.9)]
    assert wrong_effects("other-caller", "strict", rows, calls, rows) == [
        "a caller got the answer of another caller's run 1"
    ]


def test_a_run_after_a_replayed_refusal_is_a_hidden_execution() -> None:
    rows = runs(("k", A, 400, 1.0), ("k", A, 201, 3.0))
    replayed = [Call("k", A, 400, None, 0.9), Call("k", A, 400, None, 2.0)]
    replayed.append(Call("k", A, 201, 2, 2.9))
    wrong = wrong_effects("final-4xx-replayed", "draft", rows, replayed, rows)
    assert wrong == ["key 'k' created after its earlier answer was replayed"]
    assert judge_one(result("not run", "the 400 was not stored"), wrong, 1) == "missed"
    # Refused again by the view (not stored), then run: what a store of no 4xx does.
    rows = runs(("k", A, 400, 1.0), ("k", A, 400, 2.1), ("k", A, 201, 3.0))
    again = [*replayed[:1], Call("k", A, 400, None, 2.05), Call("k", A, 201, 3, 2.9)]
    assert wrong_effects("final-4xx-replayed", "draft", rows, again, rows) == []


def test_a_run_no_answer_named_is_a_hidden_execution() -> None:
    """A run that created while its answer replayed another (a stored refusal, say)."""
    rows = runs(("k", A, 400, 1.0), ("k", A, 201, 3.0))
    calls = [Call("k", A, 400, None, 0.9), Call("k", A, 400, None, 2.9)]
    wrong = wrong_effects("final-4xx-replayed", "strict", rows, calls, rows)
    assert "run(s) [2] created, and no answer named them" in wrong


@pytest.mark.parametrize(
    ("name", "key"),
    [("key-missing-400", None), ("key-oversized-400", "x" * 300), ("key-non-ascii-400", "clé")],
)
def test_a_bad_key_that_ran_is_wrong_only_under_strict(name: str, key: str | None) -> None:
    rows = runs((key, A, 201, 1.0), ("fresh", A, 201, 2.0))
    assert wrong_effects(name, "strict", rows, answered(rows), rows) == [
        "1 request(s) with the scenario's bad key ran and created"
    ]
    assert wrong_effects(name, "draft", rows, answered(rows), rows) == []


def test_rows_are_cut_at_the_stamps() -> None:
    report = {
        "profile": "strict",
        "scenarios": [
            {"name": "replay", "verdict": "pass", "evidence": ["1 effects counted", "", "n"]},
            {"name": "storm", "verdict": "pass", "evidence": ["1 effects counted", "", "n"]},
        ],
    }
    rows = runs(("k", A, 201, 1.5), ("k", A, 201, 2.5))
    judged = judge(report, [("replay", 1.0), ("storm", 2.0), ("end", 3.0)], rows, answered(rows))
    assert [(j.name, j.created, j.agreement) for j in judged] == [
        ("replay", 1, "agree"),
        ("storm", 1, "agree"),
    ]


def test_a_scenario_without_a_stamp_is_a_disagreement() -> None:
    report = {"scenarios": [{"name": "storm", "verdict": "pass", "evidence": ["", "n"]}]}
    (judged,) = judge(report, [("replay", 1.0), ("end", 2.0)], [], [])
    assert judged.agreement == "unstamped"


def recorded(name: str) -> tuple[dict[str, Any], list[tuple[str, float]], list[Run], list[Call]]:
    data = json.loads((RECORDED / f"{name}.json").read_text())
    rows = [Run(*row) for row in data["rows"]["charges"]]
    calls = [Call(*row) for row in data["rows"]["calls"]]
    return data["report"], [(name, at) for name, at in data["stamps"]], rows, calls


def test_a_recorded_run_agrees_and_a_leak_passed_would_not() -> None:
    """djangorestframework-idempotency-key 1.0.3 wired with its decorator, under strict."""
    report, stamps, rows, calls = recorded("djangorestframework-idempotency-key.strict")
    judged = {j.name: j for j in judge(report, stamps, rows, calls)}
    assert {j.agreement for j in judged.values()} == {"agree"}
    assert judged["other-caller"].wrong
    for scenario in report["scenarios"]:
        if scenario["name"] == "other-caller":
            scenario["verdict"] = "pass"
    judged = {j.name: j for j in judge(report, stamps, rows, calls)}
    assert judged["other-caller"].agreement == "false pass"


def test_stamp_notes_each_scenario_once_and_writes_through() -> None:
    out = io.StringIO()
    stamped = stamp.Stamped(out)
    for line in ("replay …", "\n", "storm …", "storm: 5/24 answered", "a warning"):
        stamped.write(line)
    assert [name for name, _ in stamped.stamps] == ["replay", "storm"]
    assert out.getvalue().startswith("replay …\nstorm …")


def test_a_run_without_a_report_is_a_disagreement(tmp_path: Path) -> None:
    """The runner died (a traceback, no JSON): the tier fails, saying how it ended."""
    (tmp_path / "err").write_text("Traceback …\nValueError: RemoteProtocolError: disconnected\n")
    out = tmp_path / "judged.json"
    args = ["dsn", str(tmp_path / "none.json"), "stamps", "draft", str(out), str(tmp_path / "err")]
    assert judge_main(args) == 1
    (row,) = json.loads(out.read_text())
    assert row["agreement"] == "no report"
    assert row["reason"].endswith("ValueError: RemoteProtocolError: disconnected")


def test_a_recorded_hidden_run_behind_a_replayed_refusal() -> None:
    """drf-idem 0.1.1 runs the view for every duplicate and answers the first answer: its
    stored 400 replayed over a valid body that ran. 0.5's runner said ``not run`` there."""
    report, stamps, rows, calls = recorded("drf-idem.strict")
    judged = {j.name: j for j in judge(report, stamps, rows, calls)}
    assert judged["final-4xx-replayed"].agreement == "agree"
    assert judged["final-4xx-replayed"].wrong
    for scenario in report["scenarios"]:
        if scenario["name"] == "final-4xx-replayed":
            scenario["verdict"] = "not run"
    judged = {j.name: j for j in judge(report, stamps, rows, calls)}
    assert judged["final-4xx-replayed"].agreement == "missed"
