"""Verdicts on scripted answers: the branches a real endpoint rarely reaches."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping

import pytest

from idempotency_django.conformance import scenarios
from idempotency_django.conformance.report import as_json, table
from idempotency_django.conformance.scenarios import FAIL, NOT_RUN, PASS, Answer, Options

JSON = {"content-type": "application/json"}
PROBLEM = {"content-type": "application/problem+json"}
Script = Callable[[Mapping[str, str | bytes], bytes], Answer]


class Scripted:
    concurrent = True
    has_other_caller = False
    in_process = False

    def __init__(self, script: Script) -> None:
        self.script = script

    def send(
        self, headers: Mapping[str, str | bytes], body: bytes, *, other: bool = False
    ) -> Answer:
        return self.script(headers, body)


def created(ident: int, replayed: bool = False) -> Answer:
    headers = {**JSON, **({"idempotent-replayed": "true"} if replayed else {})}
    return Answer(201, headers, json.dumps({"id": ident}).encode())


def run(name: str, script: Script) -> scenarios.Result:
    [result] = scenarios.run_scenarios(Scripted(script), Options(hold=0.01), only=[name])
    return result


def test_a_final_4xx_judged_without_hooks() -> None:
    seen: dict[bytes, int] = {}

    def accepts_arrays(headers: Mapping[str, str | bytes], body: bytes) -> Answer:
        return created(1)

    assert run("final-4xx-replayed", accepts_arrays).verdict == NOT_RUN

    def throttles(headers: Mapping[str, str | bytes], body: bytes) -> Answer:
        return created(1) if body != b"[]" else Answer(429, PROBLEM, b"{}")

    assert run("final-4xx-replayed", throttles).verdict == NOT_RUN

    def stores_but_never_replays(headers: Mapping[str, str | bytes], body: bytes) -> Answer:
        seen[body] = seen.get(body, 0) + 1
        if body == b"[]":
            return Answer(400, JSON, b'{"error": "no"}')
        return Answer(422, PROBLEM, b"{}") if seen.get(b"[]") else created(1)

    assert run("final-4xx-replayed", stores_but_never_replays).verdict == FAIL


def _held(second: Callable[[int], Answer]) -> Script:
    """Hooks on; per key, the first held request creates, the second answers ``second(id)``."""
    lock, seen = threading.Lock(), dict[str, int]()

    def script(headers: Mapping[str, str | bytes], body: bytes) -> Answer:
        if "Idempotency-Test-Fail" in headers:
            return Answer(503, {**PROBLEM, "idempotency-test-hook": "fail"}, b"{}")
        with lock:
            key = str(headers.get("Idempotency-Key"))
            seen[key] = seen.get(key, 0) + 1
            ident = len(seen) * 10 + seen[key]
            return created(ident) if seen[key] == 1 else second(ident)

    return script


def test_in_flight_by_time_without_overlap_is_not_run() -> None:
    result = run("in-flight-409", _held(lambda ident: created(ident - 1, replayed=True)))
    assert result.verdict == NOT_RUN, result
    assert "never arrived while the first was held" in result.evidence[-2]


def test_in_flight_by_time_with_two_executions_fails() -> None:
    result = run("in-flight-409", _held(created))
    assert result.verdict == FAIL, result
    assert "both requests executed" in result.evidence[-2]


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (Answer(500, JSON, b"{}"), "neither a replay nor a 409"),
        (Answer(409, PROBLEM, b"{}"), "integer Retry-After"),
        (Answer(409, JSON, b"{}", ""), "not problem+json"),
    ],
)
def test_storm_answers_other_than_replays_or_409_fail(answer: Answer, reason: str) -> None:
    first: set[bytes] = set()

    def script(headers: Mapping[str, str | bytes], body: bytes) -> Answer:
        key = str(headers["Idempotency-Key"]).encode()
        if key in first:
            return answer
        first.add(key)
        return created(len(first))

    result = run("storm", script)
    assert result.verdict == FAIL
    assert reason in result.evidence[-2]


def test_the_report_shows_failures_with_their_evidence() -> None:
    results = [
        scenarios.Result("replay", PASS, ["ok", "2 requests"], 2),
        scenarios.Result("storm", FAIL, ["double", "24 requests"], 24),
        scenarios.Result("other-caller", NOT_RUN, ["no second caller", "0 requests"], 0),
    ]
    text = table(results)
    assert "FAIL     storm" in text
    assert "double" in text
    assert "1 passed, 1 failed, 1 not run" in text
    assert as_json("http://x/", results)["passed"] is False
