"""The peers' table: every verdict, its rows, and each disagreement in bold."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conformance.peers import table


def judged(
    name: str, verdict: str, agreement: str = "agree", reason: str = ""
) -> dict[str, object]:
    wrong = ["key 'k' ran and created 2 times"] if agreement != "agree" else []
    return {"name": name, "verdict": verdict, "reason": reason, "created": 2, "runs": 2,
            "calls": 3, "counted": 2, "wrong": wrong, "agreement": agreement}  # fmt: skip


def test_the_table_shows_verdicts_rows_times_and_disagreements(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    strict = [judged("replay", "pass"), judged("storm", "fail", "wrong reason", "a 409")]
    draft = [judged("replay", "pass"), judged("storm", "timeout")]
    for profile, rows in (("strict", strict), ("draft", draft)):
        (tmp_path / f"scope-pkg.{profile}.judged.json").write_text(json.dumps(rows))
    (tmp_path / "scope-pkg.timings.tsv").write_text(
        "@scope/pkg==1.0\tstrict\t9\t3\t…\tDISAGREES\n@scope/pkg==1.0\tdraft\t9\t4\t…\tagrees\n"
    )
    table.main([str(tmp_path), "nest|@scope/pkg==1.0|--key-format uuid|x"])
    out = capsys.readouterr().out
    assert "1 pass, 1 fail, 0 not run; 1/2 agree with the rows" in out
    assert "1 pass, 0 fail, 0 not run, 1 timeout; 2/2 agree with the rows" in out
    assert "3 s (9 s)" in out
    assert "4 s (9 s)" in out
    assert "**FAIL (2): wrong reason** / timeout (2)" in out
    assert "* ``storm`` (strict): a 409 (rows: 2 created by 2 runs" in out
