"""Under ``--profile draft`` the runner speaks only the IETF draft.

No marked-retry header (``Idempotency-Retry``), no test hooks (``Idempotency-Test-*``):
those are this library's, sent under ``strict`` or when a flag asks for them. A server
that safely refuses another caller's reuse of a key (a 4xx, nothing run, nothing
leaked) keeps the draft; only ``strict`` fails it, saying why. Toys over real HTTP.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from idempotency_django.conformance import FAIL, PASS, Options, Result, run_scenarios
from idempotency_django.conformance.cli import main
from idempotency_django.conformance.http import HttpTransport
from tests.conformance.toy_http import PROBLEM, Reply, Request, Toy, serving

pytestmark = pytest.mark.skipif(
    not settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"),
    reason="the runner's judgement of toys runs on the SQLite tier",
)

CALLERS = ["--header", "Authorization: alice", "--other-caller-header", "Authorization: bob"]
OURS = ("idempotency-retry", "idempotency-test-fail", "idempotency-test-hold")


def run(toy: Toy, tmp_path: Path, *flags: str) -> dict[str, dict[str, Any]]:
    out = tmp_path / "results.json"
    with serving(toy) as url:
        main(
            [
                f"{url}/charges/",
                *CALLERS,
                "--count-url",
                f"{url}/count/",
                *flags,
                "--json",
                str(out),
            ]
        )
    return {s["name"]: s for s in json.loads(out.read_text())["scenarios"]}


def other_caller(toy: Toy, profile: str) -> Result:
    with serving(toy) as url:
        transport = HttpTransport(
            f"{url}/charges/", {"Authorization": "alice"}, {"Authorization": "bob"}
        )
        try:
            counted = Options(profile=profile, executions=lambda: transport.count(f"{url}/count/"))
            [result] = run_scenarios(transport, counted, only=["other-caller"])
        finally:
            transport.close()
    return result


def sent(toy: Toy) -> set[str]:
    """The headers of this library's dialect the toy received."""
    return {name for request in toy.received for name in request.headers if name in OURS}


def test_under_the_draft_nothing_of_this_librarys_dialect_is_sent(tmp_path: Path) -> None:
    toy = Toy()
    found = run(toy, tmp_path, "--profile", "draft")
    assert sent(toy) == set()  # Idempotency-Retry and Idempotency-Test-Fail were, before
    assert found["replay"]["verdict"] == "pass", found["replay"]
    for name in ("transient-5xx-not-stored", "in-flight-409"):
        assert found[name]["verdict"] == "not run"
        assert "--hooks" in found[name]["evidence"][-2], found[name]


def test_under_strict_the_marked_retry_and_the_hooks_are_sent(tmp_path: Path) -> None:
    toy = Toy()
    run(toy, tmp_path)
    assert sent(toy) == {"idempotency-retry", "idempotency-test-fail"}


def test_under_the_draft_flags_ask_for_the_marked_retry_and_the_hooks(tmp_path: Path) -> None:
    toy = Toy()
    run(toy, tmp_path, "--profile", "draft", "--marked-retry", "--hooks")
    assert sent(toy) == {"idempotency-retry", "idempotency-test-fail"}


class RefusesOtherCallers(Toy):
    """Keys shared by every caller; another caller's reuse of one is refused with ``status``."""

    def __init__(self, status: int) -> None:
        super().__init__()
        self.status = status
        self.owners: dict[str, str] = {}

    def scope(self, request: Request) -> tuple[str, str]:
        return "", str(request.key)

    def answer(self, request: Request) -> Reply:
        with self.lock:
            owner = self.owners.setdefault(str(request.key), request.caller)
        if request.key is not None and owner != request.caller:
            return Reply(self.status, {"status": self.status, "title": "key in use"}, PROBLEM)
        return super().answer(request)


@pytest.mark.parametrize("status", [400, 403, 409, 422])
def test_a_safe_refusal_of_another_callers_key_passes_the_draft_and_fails_strict_saying_why(
    status: int, tmp_path: Path
) -> None:
    draft = other_caller(RefusesOtherCallers(status), "draft")
    assert draft.verdict == PASS, draft  # "fail" before: "did not create"
    assert "4 effects counted, 4 expected" in draft.evidence, draft
    strict = other_caller(RefusesOtherCallers(status), "strict")
    assert strict.verdict == FAIL, strict
    reason = strict.evidence[-2]
    assert f"refused ({status})" in reason, reason
    assert "--key-format" not in reason  # the hint of old: the same key format had created


class LeaksToOtherCallers(RefusesOtherCallers):
    """Refuses another caller, but its refusal quotes the first caller's answer."""

    def answer(self, request: Request) -> Reply:
        reply = super().answer(request)
        if reply.status != self.status:
            return reply
        _, first = self.stored[("", str(request.key))]
        return Reply(reply.status, {"title": "key in use", "first": first.body}, PROBLEM)


def test_a_refusal_that_reveals_the_first_callers_answer_fails_the_draft_too() -> None:
    draft = other_caller(LeaksToOtherCallers(409), "draft")
    assert draft.verdict == FAIL, draft
    assert "reveals the first caller's answer" in draft.evidence[-2]
