"""The runner fails each endpoint that breaks one rule, on the scenario guarding that rule.

Each toy (``tests.conformance.views``) is the real protection with exactly one rule
broken; the protected endpoints on every adapter pass every scenario. In process,
through Django's test client, with real threads (``transaction=True``).
"""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import Client

from idempotency_django.conformance import FAIL, NOT_RUN, PASS
from idempotency_django.testing import assert_conformance, run_conformance
from tests.conformance.conftest import executions

# The runner's judgement does not depend on the database: one tier runs it (CI's time);
# the matrix (test_matrix.py) runs the protected views on every database.
ON_SQLITE = pytest.mark.skipif(
    not settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"),
    reason="the runner's judgement of toys runs on the SQLite tier",
)

pytestmark = [
    pytest.mark.faces,
    ON_SQLITE,
    pytest.mark.urls("tests.conformance.urls"),
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("hooks_on"),
]

# The baseline: the same views pass (every adapter passes in test_matrix.py's combinations).
PROTECTED = ["/conformance/function/", "/conformance/ninja/async/charges"]

# toy → the scenario it must fail; counted=False: judged black-box, without the counter.
BROKEN = [
    ("/toys/unprotected/", "replay", True),
    ("/toys/replay-without-header/", "replay", True),
    ("/toys/runs-marked-retries/", "replay", True),
    ("/toys/replay-instead-of-422/", "mismatch-422", True),
    ("/toys/runs-on-bad-key/", "key-missing-400", True),
    ("/toys/runs-on-bad-key/", "key-missing-400", False),
    ("/toys/runs-on-bad-key/", "key-oversized-400", False),
    ("/toys/runs-on-bad-key/", "key-non-ascii-400", False),
    ("/toys/check-then-act/", "storm", False),
    ("/toys/shared-tenant/", "other-caller", True),
    ("/toys/stores-5xx/", "transient-5xx-not-stored", False),
    ("/toys/final-4xx-not-stored/", "final-4xx-replayed", True),
    ("/toys/unprotected/", "in-flight-409", True),
    ("/toys/waits-when-in-flight/", "in-flight-409", True),
    ("/toys/reexecutes-stamping-replayed/", "replay", True),
    ("/toys/reexecutes-stamping-replayed/", "replay", False),
    ("/toys/reexecutes-stamping-replayed/", "storm", True),
    ("/toys/reexecutes-stamping-replayed/", "storm", False),
    ("/toys/reexecutes-stamping-replayed-string-ids/", "replay", True),
    ("/toys/reexecutes-stamping-replayed-string-ids/", "storm", True),
]

# The scenarios whose verdict rests on counting executions ("nothing ran", "one per key").
COUNTING = ["replay", "mismatch-422", "key-missing-400", "key-oversized-400", "key-non-ascii-400"]
COUNTING += ["storm"]
UNCOUNTED = "needs integer ids in --id-field, or --count-url"


@pytest.mark.parametrize("path", PROTECTED)
def test_protected_endpoints_pass_every_scenario(path: str, callers: tuple[Client, Client]) -> None:
    first, second = callers
    results = assert_conformance(first, path, other_client=second, executions=executions)
    assert {r.name: r.verdict for r in results} == dict.fromkeys([r.name for r in results], PASS), (
        results
    )


@pytest.mark.parametrize(("path", "scenario", "counted"), BROKEN)
def test_a_toy_breaking_one_rule_fails_its_scenario(
    path: str, scenario: str, counted: bool, callers: tuple[Client, Client]
) -> None:
    first, second = callers
    (result,) = run_conformance(
        first,
        path,
        other_client=second,
        executions=executions if counted else None,
        only=[scenario],
        patience=2,
    )
    assert result.verdict == FAIL, result


def test_assert_conformance_raises_with_the_evidence(callers: tuple[Client, Client]) -> None:
    with pytest.raises(AssertionError, match=r"replay: .*executed again"):
        assert_conformance(callers[0], "/toys/unprotected/", only=["replay"])


def test_without_a_second_caller_or_hooks_those_scenarios_are_not_run(
    callers: tuple[Client, Client], settings: object
) -> None:
    settings.IDEMPOTENCY_CONFORMANCE_HOOKS = False  # type: ignore[attr-defined]
    results = {r.name: r for r in run_conformance(callers[0], "/conformance/function/")}
    assert results["other-caller"].verdict == NOT_RUN
    assert results["transient-5xx-not-stored"].verdict == NOT_RUN
    assert results["in-flight-409"].verdict == NOT_RUN
    # Without hooks the final 4xx is provoked by a JSON array, which this view refuses.
    assert results["final-4xx-replayed"].verdict == PASS
    assert results["replay"].verdict == PASS


def test_a_refusal_before_the_protection_is_not_judged_a_final_4xx(
    callers: tuple[Client, Client], settings: object
) -> None:
    settings.IDEMPOTENCY_CONFORMANCE_HOOKS = False  # type: ignore[attr-defined]
    # Ninja validates the body before the protected operation runs: nothing is stored.
    (result,) = run_conformance(
        callers[0], "/conformance/ninja/charges", only=["final-4xx-replayed"]
    )
    assert result.verdict == NOT_RUN, result
    assert "before the protection" in result.evidence[-2]


@pytest.mark.django_db
def test_inside_a_test_transaction_the_storm_is_sequential_and_in_flight_not_run(
    callers: tuple[Client, Client],
) -> None:
    results = {r.name: r for r in run_conformance(callers[0], "/conformance/function/")}
    assert results["storm"].verdict == PASS
    assert "sequential" in results["storm"].evidence[0]
    assert results["in-flight-409"].verdict == NOT_RUN
    assert "transaction=True" in results["in-flight-409"].evidence[-2]


@pytest.mark.parametrize("scenario", ["replay", "storm"])
@pytest.mark.parametrize("profile", ["strict", "draft"])
def test_a_replay_header_stamped_on_a_second_execution_is_not_believed(
    scenario: str, profile: str, callers: tuple[Client, Client]
) -> None:
    (result,) = run_conformance(
        callers[0], "/toys/reexecutes-stamping-replayed/", only=[scenario], profile=profile
    )
    assert result.verdict == FAIL, result
    assert "ids jumped" in result.evidence[-2]


@pytest.mark.parametrize("scenario", ["replay", "storm"])
def test_a_correct_replay_without_the_replay_header_passes_the_draft_with_a_warning(
    scenario: str, callers: tuple[Client, Client]
) -> None:
    (result,) = run_conformance(
        callers[0], "/toys/replay-without-header/", only=[scenario], profile="draft"
    )
    assert result.verdict == PASS, result
    assert any("Idempotent-Replayed" in warning for warning in result.warnings), result


def test_under_strict_a_replay_without_the_header_fails_for_the_header_not_as_a_new_execution(
    callers: tuple[Client, Client],
) -> None:
    (result,) = run_conformance(callers[0], "/toys/replay-without-header/", only=["replay"])
    assert result.verdict == FAIL, result
    assert "executed again" not in result.evidence[-2]
    assert "without 'Idempotent-Replayed: true'" in result.evidence[-2]


def test_an_endpoint_keyed_by_another_header_passes_when_the_runner_sends_that_header(
    callers: tuple[Client, Client],
) -> None:
    path = "/others/keyed-by-request-id/"
    scenarios = ["replay", "mismatch-422", "key-missing-400", "storm", "other-caller"]
    first, second = callers
    results = run_conformance(
        first,
        path,
        other_client=second,
        executions=executions,
        header="X-Request-ID",
        key_format="uuid",
        only=scenarios,
    )
    assert {r.name: r.verdict for r in results} == dict.fromkeys(scenarios, PASS), results
    (wrong,) = run_conformance(first, path, executions=executions, only=["replay"])
    assert wrong.verdict == FAIL, wrong


def test_the_effects_counted_before_and_after_each_scenario_are_in_its_evidence(
    callers: tuple[Client, Client],
) -> None:
    (result,) = run_conformance(
        callers[0], "/conformance/function/", executions=executions, only=["replay"]
    )
    assert result.verdict == PASS, result
    assert "3 effects counted, 3 expected" in " ".join(result.evidence), result


@pytest.mark.parametrize("scenario", ["replay", "storm"])
def test_a_stamped_replay_with_string_ids_and_no_counter_is_not_run_never_a_pass(
    scenario: str, callers: tuple[Client, Client]
) -> None:
    before = executions()
    (result,) = run_conformance(
        callers[0], "/toys/reexecutes-stamping-replayed-string-ids/", only=[scenario]
    )
    assert executions() - before > result.requests // 2  # it did charge again, unseen
    assert result.verdict == NOT_RUN, result
    assert UNCOUNTED in result.evidence[-2], result
    assert not any("one execution" in line for line in result.evidence), result


def test_a_correct_endpoint_with_string_ids_is_not_run_where_only_counting_tells(
    callers: tuple[Client, Client],
) -> None:
    first, second = callers
    results = run_conformance(first, "/others/string-ids/", other_client=second)
    verdicts = {r.name: r.verdict for r in results}
    assert verdicts == {
        **dict.fromkeys(verdicts, PASS),
        **dict.fromkeys(COUNTING, NOT_RUN),
    }, results
    for result in results:
        if result.verdict == NOT_RUN:
            assert UNCOUNTED in result.evidence[-2], result


def test_a_correct_endpoint_with_string_ids_passes_when_executions_are_counted(
    callers: tuple[Client, Client],
) -> None:
    first, second = callers
    results = assert_conformance(
        first, "/others/string-ids/", other_client=second, executions=executions
    )
    assert {r.verdict for r in results} == {PASS}, results


def test_integer_ids_count_the_executions_without_a_counter(
    callers: tuple[Client, Client],
) -> None:
    results = run_conformance(callers[0], "/conformance/function/", only=COUNTING)
    assert {r.verdict for r in results} == {PASS}, results
    (replay,) = (r for r in results if r.name == "replay")
    assert any(line.startswith("one execution") for line in replay.evidence), replay


def test_a_broken_rule_shown_by_the_answers_fails_even_when_executions_cannot_be_counted(
    callers: tuple[Client, Client],
) -> None:
    # Another body replayed instead of 422: the answer shows it, no counting needed.
    (result,) = run_conformance(
        callers[0], "/toys/reexecutes-stamping-replayed-string-ids/", only=["mismatch-422"]
    )
    assert result.verdict == FAIL, result
