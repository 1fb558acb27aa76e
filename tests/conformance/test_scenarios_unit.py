"""Verdicts on scripted answers: the branches a real endpoint rarely reaches."""

from __future__ import annotations

import json
import threading
import uuid
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

    refused: set[object] = set()  # the keys sent with [] (the valid body then gets 422)

    def stores_but_never_replays(headers: Mapping[str, str | bytes], body: bytes) -> Answer:
        key = headers.get("Idempotency-Key")
        if body == b"[]":
            refused.add(key)
            return Answer(400, JSON, b'{"error": "no"}')
        return Answer(422, PROBLEM, b"{}") if key in refused else created(1)

    assert run("final-4xx-replayed", stores_but_never_replays).verdict == NOT_RUN

    def takes_the_key_and_refuses_again(headers: Mapping[str, str | bytes], body: bytes) -> Answer:
        key = headers.get("Idempotency-Key")
        seen[body] = seen.get(body, 0) + 1
        if body == b"[]":
            refused.add(key)
            return Answer(400, JSON, b'{"error": "no"}' if seen[body] == 1 else b'{"error": "2"}')
        return Answer(422, PROBLEM, b"{}") if key in refused else created(1)

    assert run("final-4xx-replayed", takes_the_key_and_refuses_again).verdict == FAIL


def test_an_identical_refusal_without_a_replay_header_is_not_called_a_replay() -> None:
    def script(headers: Mapping[str, str | bytes], body: bytes) -> Answer:
        if body == b"[]":
            return Answer(400, JSON, b'{"error": "send an object"}')
        return Answer(422, PROBLEM, b"{}")  # the key is taken: the refusal was recorded

    for profile in ("strict", "draft"):
        [result] = scenarios.run_scenarios(
            Scripted(script), Options(profile=profile), only=["final-4xx-replayed"]
        )
        assert result.verdict == NOT_RUN, result
        assert "replayed or refused again cannot be told" in result.evidence[-2]


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
    # The duplicates during the storm get ``answer``; the follow-up after it, a replay.
    result = run_with("storm", Endpoint(lambda first, n: answer if n <= 6 else stamped(first)))
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


class Endpoint:
    """A scripted endpoint keyed per ``Idempotency-Key``: it creates once, ``duplicate`` after.

    ``effects`` counts what it created (``per_execution`` each time it runs).
    """

    def __init__(
        self,
        duplicate: Callable[[Answer, int], Answer] | None = None,
        per_execution: int = 1,
        rerun: bool = False,
    ) -> None:
        self.lock = threading.Lock()
        self.first: dict[str, Answer] = {}
        self.seen: dict[str, int] = {}
        self.effects = 0
        self.per_execution = per_execution
        self.duplicate = duplicate or (lambda first, n: first)
        self.rerun = rerun  # duplicates run the view too
        self.keys: list[str] = []

    def __call__(self, headers: Mapping[str, str | bytes], body: bytes) -> Answer:
        key = str(headers.get("Idempotency-Key"))
        with self.lock:
            self.keys.append(key)
            self.seen[key] = self.seen.get(key, 0) + 1
            if key not in self.first:
                self.effects += self.per_execution
                self.first[key] = created(len(self.first) + 1)
                return self.first[key]
            self.effects += self.per_execution if self.rerun else 0
            return self.duplicate(self.first[key], self.seen[key])


def stamped(answer: Answer) -> Answer:
    return Answer(answer.status, {**answer.headers, "idempotent-replayed": "true"}, answer.body)


def run_with(name: str, endpoint: Endpoint, **options: object) -> scenarios.Result:
    opts = Options(hold=0.01, executions=lambda: endpoint.effects, **options)  # type: ignore[arg-type]
    [result] = scenarios.run_scenarios(Scripted(endpoint), opts, only=[name])
    return result


def test_a_replay_with_the_first_answers_id_is_never_called_a_new_execution() -> None:
    strict = run_with("replay", Endpoint())
    assert strict.verdict == FAIL, strict
    assert "executed again" not in strict.evidence[-2]
    assert "same id 1" in strict.evidence[-2]
    draft = run_with("replay", Endpoint(), profile="draft")
    assert draft.verdict == PASS, draft
    assert draft.warnings, draft


def test_more_effects_than_the_scenario_expects_fail_it() -> None:
    result = run_with("replay", Endpoint(lambda first, n: stamped(first), per_execution=2))
    assert result.verdict == FAIL, result
    assert "6 effects counted, 3 expected" in result.evidence[-2]


def _busy_then_replay(first: Answer, n: int) -> Answer:
    # The storm's six duplicates of a key: 409 as plain JSON, no Retry-After; then replays.
    return Answer(409, JSON, b'{"error": "busy"}') if n <= 6 else stamped(first)


@pytest.mark.parametrize("name", ["storm", "mismatch-422"])
def test_errors_as_plain_json_fail_strict_and_warn_under_the_draft(name: str) -> None:
    def endpoint() -> Endpoint:
        def duplicate(first: Answer, n: int) -> Answer:
            if name == "mismatch-422" and n == 2:
                return Answer(422, JSON, b'{"error": "another body"}')
            return _busy_then_replay(first, n) if name == "storm" else stamped(first)

        return Endpoint(duplicate)

    assert run_with(name, endpoint()).verdict == FAIL
    draft = run_with(name, endpoint(), profile="draft")
    assert draft.verdict == PASS, draft
    assert any("problem+json" in warning for warning in draft.warnings), draft


def test_a_final_4xx_whose_follow_up_is_refused_for_another_reason_is_not_run() -> None:
    def script(headers: Mapping[str, str | bytes], body: bytes) -> Answer:
        if body == b"[]":
            return Answer(400, JSON, b'{"error": "send an object"}')
        return Answer(500, JSON, b'{"error": "unrelated"}')

    result = run("final-4xx-replayed", script)
    assert result.verdict == NOT_RUN, result
    assert "needs" in result.evidence[-2]


def test_every_not_run_names_what_it_would_need() -> None:
    endpoint = Endpoint(lambda first, n: stamped(first))
    results = scenarios.run_scenarios(Scripted(endpoint), Options(hold=0.01))
    skipped = [r for r in results if r.verdict == NOT_RUN]
    assert {r.name for r in skipped} >= {"other-caller", "transient-5xx-not-stored"}
    for result in skipped:
        assert "needs" in result.evidence[-2], result


@pytest.mark.parametrize(("key_format", "prefix"), [("uuid", ""), ("token", "conformance-")])
def test_the_key_format_chooses_plain_uuids_or_prefixed_tokens(
    key_format: str, prefix: str
) -> None:
    endpoint = Endpoint(lambda first, n: stamped(first))
    assert run_with("replay", endpoint, key_format=key_format).verdict == PASS
    for key in endpoint.keys:
        assert key.startswith(prefix)
        assert str(uuid.UUID(key.removeprefix(prefix))) == key.removeprefix(prefix)


def test_a_warning_is_shown_in_the_table() -> None:
    result = scenarios.Result("replay", PASS, ["ok", "2 requests"], 2, ["no replay header"])
    assert "warning: no replay header" in table([result])
    assert as_json("http://x/", [result])["scenarios"][0]["warnings"] == ["no replay header"]


def test_a_missing_key_run_anyway_fails_strict_and_is_not_run_under_the_draft() -> None:
    def endpoint() -> Endpoint:
        return Endpoint(lambda first, n: stamped(first))

    assert run_with("key-missing-400", endpoint()).verdict == FAIL
    draft = run_with("key-missing-400", endpoint(), profile="draft")
    assert draft.verdict == NOT_RUN, draft
    assert "needs an operation that requires a key" in draft.evidence[-2]


def test_a_second_execution_is_the_evidence_when_the_replay_header_is_missing_too() -> None:
    # Every duplicate runs again, and gets the first answer back without the header.
    result = run_with("replay", Endpoint(rerun=True))
    assert result.verdict == FAIL, result
    assert "the retries ran the view" in result.evidence[-2], result


@pytest.mark.parametrize("name", ["key-oversized-400", "key-non-ascii-400"])
def test_under_the_draft_a_bad_key_accepted_is_not_run_and_refused_otherwise_is_a_warning(
    name: str,
) -> None:
    accepted = run_with(name, Endpoint(lambda first, n: stamped(first)), profile="draft")
    assert accepted.verdict == NOT_RUN, accepted
    assert "the draft sets no rule for such a key" in accepted.evidence[-2]

    def crashes(headers: Mapping[str, str | bytes], body: bytes) -> Answer:
        key = headers.get("Idempotency-Key", b"")
        if isinstance(key, bytes) or len(key) > 255:
            return Answer(500, {"content-type": "text/html"}, b"<h1>Server Error</h1>")
        return endpoint(headers, body)

    endpoint = Endpoint()
    opts = Options(profile="draft", executions=lambda: endpoint.effects)
    [result] = scenarios.run_scenarios(Scripted(crashes), opts, only=[name])
    assert result.verdict == PASS, result
    assert any("answered 500, not 400" in warning for warning in result.warnings)


@pytest.mark.parametrize("status", [400, 500])
def test_a_prefixed_key_refused_suggests_plain_uuids(status: int) -> None:
    def script(headers: Mapping[str, str | bytes], body: bytes) -> Answer:
        return Answer(status, JSON, b'{"error": "bad key"}')

    assert "--key-format uuid" in run("replay", script).evidence[-2]
    opts = Options(key_format="uuid")
    [result] = scenarios.run_scenarios(Scripted(script), opts, only=["replay"])
    assert "--key-format" not in result.evidence[-2]


class RandomIds(Endpoint):
    """A correct endpoint whose integer ids do not grow (random, like a 64-bit token)."""

    def __call__(self, headers: Mapping[str, str | bytes], body: bytes) -> Answer:
        if "Idempotency-Key" not in headers:
            return Answer(400, PROBLEM, b'{"status": 400}')
        answer = super().__call__(headers, body)
        ident = json.loads(answer.body).get("id")
        if ident is None:
            return answer
        return Answer(answer.status, answer.headers, json.dumps({"id": -ident}).encode())


@pytest.mark.parametrize("name", ["replay", "storm", "mismatch-422", "key-missing-400"])
def test_ids_that_do_not_grow_count_nothing_the_scenario_is_not_run_without_a_counter(
    name: str,
) -> None:
    def duplicate(first: Answer, n: int) -> Answer:
        if name == "mismatch-422" and n == 2:
            return Answer(422, PROBLEM, b'{"status": 422}')
        return stamped(first)

    endpoint = RandomIds(duplicate)
    [result] = scenarios.run_scenarios(Scripted(endpoint), Options(hold=0.01), only=[name])
    assert result.verdict == NOT_RUN, result
    assert "needs integer ids in --id-field, or --count-url" in result.evidence[-2]
    assert run_with(name, RandomIds(duplicate)).verdict == PASS


def test_a_breach_the_answers_show_still_fails_when_executions_cannot_be_counted() -> None:
    # The replay carries no header (strict requires it): proven without counting.
    endpoint = RandomIds()
    [result] = scenarios.run_scenarios(Scripted(endpoint), Options(hold=0.01), only=["replay"])
    assert result.verdict == FAIL, result
    assert "without 'Idempotent-Replayed: true'" in result.evidence[-2]


def test_a_result_passes_only_with_a_pass_verdict() -> None:
    assert scenarios.Result("replay", PASS).passed
    assert not scenarios.Result("replay", FAIL).passed
    assert not scenarios.Result("replay", NOT_RUN).passed


def test_a_server_that_never_answers_is_shown_as_no_answer_with_its_error() -> None:
    def silent(headers: Mapping[str, str | bytes], body: bytes) -> Answer:
        return Answer(0, {}, b"", "ConnectError: refused")

    result = run("replay", silent)
    assert result.verdict == FAIL, result
    assert "no answer (ConnectError: refused)" in result.evidence[-2]
    assert "the server did not answer" in result.evidence[-2]


def test_another_body_without_an_integer_amount_is_told_apart_by_a_variant_field() -> None:
    bodies: list[dict[str, object]] = []

    def duplicate(first: Answer, n: int) -> Answer:
        return Answer(422, PROBLEM, b'{"status": 422}') if n == 2 else stamped(first)

    endpoint = Endpoint(duplicate)

    def recording(headers: Mapping[str, str | bytes], body: bytes) -> Answer:
        bodies.append(json.loads(body))
        return endpoint(headers, body)

    opts = Options(body={"sku": "tea"}, executions=lambda: endpoint.effects)
    [result] = scenarios.run_scenarios(Scripted(recording), opts, only=["mismatch-422"])
    assert result.verdict == PASS, result
    assert {"sku": "tea", "conformance_variant": 1} in bodies
    assert bodies[0] == {"sku": "tea"}


def test_a_retry_answered_with_another_status_is_not_a_replay() -> None:
    def ok_not_created(first: Answer, n: int) -> Answer:
        return Answer(200, {**first.headers, "idempotent-replayed": "true"}, first.body)

    result = run_with("replay", Endpoint(ok_not_created))
    assert result.verdict == FAIL, result
    assert result.evidence[-2].startswith(
        "the marked retry is not the first answer: 200 [replayed]"
    )


def test_another_body_answered_without_an_id_is_judged_on_its_status_alone() -> None:
    def busy(first: Answer, n: int) -> Answer:
        return Answer(409, PROBLEM, b'{"status": 409}') if n == 2 else stamped(first)

    result = run_with("mismatch-422", Endpoint(busy))
    assert result.verdict == FAIL, result
    assert result.evidence[-2] == 'expected 422, got 409 {"status": 409}'


def test_a_422_that_carries_the_stored_answer_reveals_it() -> None:
    def leaks(first: Answer, n: int) -> Answer:
        if n == 2:
            return Answer(422, PROBLEM, b'{"status": 422, "stored": ' + first.body + b"}")
        return stamped(first)

    result = run_with("mismatch-422", Endpoint(leaks))
    assert result.verdict == FAIL, result
    assert result.evidence[-2] == "the 422 reveals the stored answer"


class RefusesNoKeyWithAnId(Endpoint):
    """Answers 400 to a request without a key, but with an ``id``: as if it had created."""

    def __call__(self, headers: Mapping[str, str | bytes], body: bytes) -> Answer:
        if "Idempotency-Key" not in headers:
            return Answer(400, PROBLEM, b'{"status": 400, "id": 99}')
        return super().__call__(headers, body)


def test_a_400_for_a_missing_key_that_carries_an_id_fails() -> None:
    result = run_with("key-missing-400", RefusesNoKeyWithAnId(lambda first, n: stamped(first)))
    assert result.verdict == FAIL, result
    assert result.evidence[-2] == "no key: the 400 carries an id or a replay"


BUSY = Answer(409, {**PROBLEM, "retry-after": "1"}, b'{"status": 409}')


class BusyDuringTheStorm(Endpoint):
    """Every request of the storm (its worker threads) gets 409; so do a storm key's later
    ones unless the key ``frees``; the rest as ``Endpoint``."""

    def __init__(self, frees: bool) -> None:
        super().__init__(lambda first, n: stamped(first))
        self.frees = frees
        self.stormed: set[str] = set()

    def __call__(self, headers: Mapping[str, str | bytes], body: bytes) -> Answer:
        key = str(headers.get("Idempotency-Key"))
        if threading.current_thread().name.startswith("conformance-storm"):
            with self.lock:
                self.stormed.add(key)
            return BUSY
        if key in self.stormed and not self.frees:
            return BUSY
        return super().__call__(headers, body)


def test_a_storm_answered_only_409_passes_when_each_key_then_creates_once() -> None:
    result = run_with("storm", BusyDuringTheStorm(frees=True))
    assert result.verdict == PASS, result
    # The four follow-ups created ids 2 to 5, between the fresh requests' 1 and 6.
    assert "ids around the storm: 1, then 6, 7" in result.evidence
    assert "7 effects counted, 7 expected" in result.evidence


def test_a_storm_answered_only_409_fails_when_the_key_never_frees() -> None:
    result = run_with("storm", BusyDuringTheStorm(frees=False))
    assert result.verdict == FAIL, result
    assert "after the storm the key does not replay: 409" in result.evidence[-2]


class TwoCallers(Scripted):
    has_other_caller = True

    def __init__(self, script: Script, other: Answer) -> None:
        super().__init__(script)
        self.other = other

    def send(
        self, headers: Mapping[str, str | bytes], body: bytes, *, other: bool = False
    ) -> Answer:
        return self.other if other else self.script(headers, body)


def test_another_caller_refused_is_not_a_pass_and_the_hint_names_credentials() -> None:
    endpoint = Endpoint(lambda first, n: stamped(first))
    transport = TwoCallers(endpoint, Answer(403, PROBLEM, b'{"detail": "forbidden"}'))
    opts = Options(executions=lambda: endpoint.effects)
    [result] = scenarios.run_scenarios(transport, opts, only=["other-caller"])
    assert result.verdict == FAIL, result
    assert "the other caller's request did not create" in result.evidence[-2]
    assert "pass the caller's credentials with --header" in result.evidence[-2]


HOOKED = {**PROBLEM, "idempotency-test-hook": "fail"}


def test_a_hook_answering_other_than_503_fails_the_transient_scenario() -> None:
    def script(headers: Mapping[str, str | bytes], body: bytes) -> Answer:
        if "Idempotency-Test-Fail" in headers:
            return Answer(500, HOOKED, b'{"status": 500}')
        return created(1)

    result = run("transient-5xx-not-stored", script)
    assert result.verdict == FAIL, result
    assert result.evidence[-2].startswith("the hook asked for 503, the answer was 500")


def test_a_retry_after_a_503_that_does_not_create_fails() -> None:
    def script(headers: Mapping[str, str | bytes], body: bytes) -> Answer:
        if "Idempotency-Test-Fail" in headers:
            return Answer(503, HOOKED, b'{"status": 503}')
        return Answer(400, PROBLEM, b'{"status": 400}')

    result = run("transient-5xx-not-stored", script)
    assert result.verdict == FAIL, result
    assert result.evidence[-2].startswith("the retry did not run afresh")


def test_in_process_a_held_request_that_never_reaches_its_view_fails() -> None:
    class InProcess(Scripted):
        in_process = True

    # Hooks answer the probe, but the held request returns without entering the hold.
    script = _held(lambda ident: created(ident - 1, replayed=True))
    opts = Options(patience=0.01)
    [result] = scenarios.run_scenarios(InProcess(script), opts, only=["in-flight-409"])
    assert result.verdict == FAIL, result
    assert result.evidence[-2] == "the held request never reached its view"


def test_a_duplicate_refused_409_while_the_held_request_fails_is_a_failure() -> None:
    lock, seen = threading.Lock(), dict[str, int]()

    def script(headers: Mapping[str, str | bytes], body: bytes) -> Answer:
        if "Idempotency-Test-Fail" in headers:
            return Answer(503, HOOKED, b"{}")
        with lock:
            key = str(headers.get("Idempotency-Key"))
            seen[key] = seen.get(key, 0) + 1
            if seen[key] == 1:
                return Answer(500, JSON, b'{"error": "crashed"}')
            return Answer(409, {**PROBLEM, "retry-after": "1"}, b'{"status": 409}')

    result = run("in-flight-409", script)
    assert result.verdict == FAIL, result
    assert result.evidence[-2].startswith("the held request failed: 500")


def test_a_scenario_that_cannot_tell_its_executions_keeps_not_telling() -> None:
    run_ = scenarios.Run(Scripted(lambda headers, body: created(1)), Options())
    run_.expected = None
    run_.expect(1)
    assert run_.expected is None


def test_the_first_reason_a_scenario_could_not_count_is_the_one_reported() -> None:
    run_ = scenarios.Run(Scripted(lambda headers, body: created(1)), Options())
    scenarios.uncounted(run_, "the retries", "integers")
    scenarios.uncounted(run_, "the storm", "growing integers")
    assert run_.uncounted.startswith("the ids are not integers: the executions around the retries")


def test_a_scenario_the_runner_cannot_judge_is_an_error_and_the_run_goes_on() -> None:
    def crashes_the_runner(headers: Mapping[str, str | bytes], body: bytes) -> Answer:
        if "Idempotency-Retry" in headers:
            raise RuntimeError("a bug of ours")
        return created(1)

    results = scenarios.run_scenarios(
        Scripted(crashes_the_runner), Options(), only=["replay", "key-missing-400"]
    )
    assert [r.verdict for r in results] == [scenarios.ERROR, FAIL], results
    assert results[0].evidence[-2] == "the runner could not judge: RuntimeError: a bug of ours"
    assert "ERROR    replay" in table(results)
    assert "1 runner errors" in table(results)
    assert [r.name for r in scenarios.failures(results)] == ["replay", "key-missing-400"]


def test_a_failure_the_answers_show_stands_when_the_counter_fails() -> None:
    endpoint = Endpoint(rerun=True)
    reads = iter([0])

    def counter() -> int:
        return next(reads)  # StopIteration after the first read

    opts = Options(executions=counter)
    [result] = scenarios.run_scenarios(Scripted(endpoint), opts, only=["replay"])
    assert result.verdict == FAIL, result
    assert "the effects could not be counted: StopIteration" in result.evidence


def test_a_timeout_is_its_own_verdict_with_the_transports_words() -> None:
    def slow(headers: Mapping[str, str | bytes], body: bytes) -> Answer:
        raise scenarios.TimedOut("no answer within --timeout 1 s")

    [result] = scenarios.run_scenarios(Scripted(slow), Options(), only=["replay"])
    assert result.verdict == scenarios.TIMEOUT
    assert result.evidence[-2] == "no answer within --timeout 1 s"
    assert as_json("http://x/", [result])["passed"] is False


@pytest.mark.parametrize(
    "other", [Answer(500, JSON, b'{"error": "boom"}'), Answer(201, JSON, b"{}")]
)
def test_another_caller_answered_neither_a_creation_nor_a_refusal_fails(other: Answer) -> None:
    endpoint = Endpoint(lambda first, n: stamped(first))
    opts = Options(executions=lambda: endpoint.effects)
    [result] = scenarios.run_scenarios(TwoCallers(endpoint, other), opts, only=["other-caller"])
    assert result.verdict == FAIL, result
    assert "the other caller's request did not create" in result.evidence[-2]
    assert "--key-format" not in result.evidence[-2]  # a key of this format already created
