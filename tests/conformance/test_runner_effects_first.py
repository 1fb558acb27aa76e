"""Effects first: an execution the scenario did not expect fails it, whatever the answers say.

A server that stores a refusal, replays it, and still runs the valid body sent under the
same key hides an execution behind a replayed refusal: the count shows it. And a storm
of identical warnings is one line with its count. Toys over real HTTP.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.conf import settings

from idempotency_django.conformance import FAIL, PASS, Options, run_scenarios
from idempotency_django.conformance.http import HttpTransport
from idempotency_django.conformance.report import table
from idempotency_django.conformance.scenarios import Result
from tests.conformance.toy_http import JSON, Reply, Request, Toy, serving

pytestmark = pytest.mark.skipif(
    not settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"),
    reason="the runner's judgement of toys runs on the SQLite tier",
)


def judge(toy: Toy, scenario: str, *, counter: bool = True, **options: Any) -> Result:
    """``scenario``'s result on ``toy``, with its count URL (or its ids alone)."""
    with serving(toy) as url:
        transport = HttpTransport(f"{url}/charges/", {"Authorization": "alice"})
        try:
            count = lambda: transport.count(f"{url}/count/")  # noqa: E731
            opts = Options(executions=count if counter else None, **options)
            [result] = run_scenarios(transport, opts, only=[scenario])
        finally:
            transport.close()
    return result


class RunsThenReplays(Toy):
    """Every request under a used key runs the view, then answers the stored answer
    (without a replay header): a refusal stored for ``[]`` hides the valid body's run."""

    def again(self, request: Request, body: bytes, reply: Reply) -> Reply:
        self.execute(request)
        return reply


class ReplaysRefusalsThenRuns(Toy):
    """Stores a refusal and replays it (with the header) to the same body; another body
    under that key runs as if the key were new."""

    def again(self, request: Request, body: bytes, reply: Reply) -> Reply:
        if request.body != body and reply.status >= 400:
            return self.execute(request)
        return super().again(request, body, reply)


@pytest.mark.parametrize("profile", ["strict", "draft"])
def test_a_run_hidden_behind_a_replayed_refusal_fails_with_the_effect_counted(
    profile: str,
) -> None:
    result = judge(RunsThenReplays(), "final-4xx-replayed", profile=profile)
    assert result.verdict == FAIL, result  # "not run" before: "refused for another reason"
    # One more than expected (under strict, the hooks' probe created one: expected).
    made, expected = map(
        int, re.findall(r"(\d+) effects counted, (\d+) expected", result.evidence[-2])[0]
    )
    assert made == expected + 1, result
    assert "something ran that no answer shows" in result.evidence[-2]


def test_without_a_counter_the_ids_show_the_run_hidden_behind_a_replayed_refusal() -> None:
    result = judge(RunsThenReplays(), "final-4xx-replayed", counter=False, profile="draft")
    assert result.verdict == FAIL, result  # "not run" before
    assert "the refused requests: the ids jumped from 1 to 3" in result.evidence[-2], result


def test_a_stored_refusal_replayed_and_then_another_body_run_under_its_key_fails() -> None:
    result = judge(ReplaysRefusalsThenRuns(), "final-4xx-replayed")
    assert result.verdict == FAIL, result  # a pass before: the follow-up was never sent
    assert "the valid body then ran" in result.evidence[-2], result


def test_a_correct_server_still_passes_final_4xx() -> None:
    result = judge(Toy(), "final-4xx-replayed")
    assert result.verdict == PASS, result
    # The hooks' probe (strict; this toy ignores it) created one: expected, and counted.
    assert "1 effects counted, 1 expected" in result.evidence, result


class BusyThenReplays(Toy):
    """A key's first five duplicates get 409 as plain JSON without Retry-After, then replays."""

    def __init__(self) -> None:
        super().__init__()
        self.duplicates: dict[str, int] = {}

    def again(self, request: Request, body: bytes, reply: Reply) -> Reply:
        seen = self.duplicates[str(request.key)] = self.duplicates.get(str(request.key), 0) + 1
        if seen <= 5:
            return Reply(409, {"error": "busy"}, JSON)
        return super().again(request, body, reply)


def test_repeated_warnings_are_one_line_each_with_their_count() -> None:
    result = judge(BusyThenReplays(), "storm", profile="draft")
    assert result.verdict == PASS, result
    # 20 answers of 409, each breaking two recommendations: 40 lines before.
    assert len(result.warnings) == 2, result.warnings
    assert all("(20 times)" in warning for warning in result.warnings), result.warnings
    assert table([result]).count("warning:") == 2


class ReplaysTheFirstAnswerAndRunsTheOtherBody(Toy):
    """drf-idem 0.1.1 in the peers tier: another body under a used key runs, and the answer
    is the first one's (its id, no replay header)."""

    def again(self, request: Request, body: bytes, reply: Reply) -> Reply:
        if request.body != body:
            self.execute(request)
            return reply
        return super().again(request, body, reply)


def test_another_body_run_behind_the_first_answer_is_named_as_a_run() -> None:
    result = judge(ReplaysTheFirstAnswerAndRunsTheOtherBody(), "mismatch-422")
    assert result.verdict == FAIL, result
    # Before: only "it carries the first answer's id 1", a replay's description.
    assert any(
        "yet the other body ran: executions went from 1 to 2" in e for e in result.evidence
    ), result


class ReplaysKeylessDuplicates(Toy):
    """fastapi-idempotency 0.1.1 in the peers tier: no key needed; the same caller and body
    within its window is answered as a replay of the first, which ran."""

    def answer(self, request: Request) -> Reply:
        if request.key is not None:
            return super().answer(request)
        with self.lock:
            first = self.stored.get((request.caller, "keyless:" + request.body.decode()))
            if first is not None:
                reply = first[1]
                return Reply(
                    reply.status, reply.body, {**reply.headers, "Idempotent-Replayed": "true"}
                )
            reply = self.execute(request)
            self.stored[(request.caller, "keyless:" + request.body.decode())] = (
                request.body,
                reply,
            )
            return reply


def test_under_the_draft_a_keyless_request_answered_as_a_replay_is_no_execution() -> None:
    toy = ReplaysKeylessDuplicates()
    judge(toy, "key-missing-400", profile="draft")  # the first keyless request runs
    result = judge(toy, "key-missing-400", profile="draft")  # replayed: nothing ran
    # Before: a fail, "1 effects counted, 2 expected" (a replay counted as a run).
    assert result.verdict != FAIL, result
