"""The runner's transport: what the network does is never judged as the server's answer.

A keep-alive connection the server closed or reset is retried on a new one; a count URL
that fails is reported in the verdict; a request that outlasts ``--timeout`` is a verdict
of its own; and every run ends with its table and its JSON. Toys over real HTTP
(``toy_http``), judged by the command line's ``main``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from idempotency_django.conformance.cli import main
from idempotency_django.conformance.http import HttpTransport
from tests.conformance.toy_http import PROBLEM, Reply, Request, Toy, serving

pytestmark = pytest.mark.skipif(
    not settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"),
    reason="the runner's judgement of toys runs on the SQLite tier",
)

CALLERS = ["--header", "Authorization: alice", "--other-caller-header", "Authorization: bob"]


class CrashesOnOddKeys(Toy):
    """An unhandled exception on a non-ASCII or oversized key: 500, and the connection is
    closed (or reset) under the next request sent on it, as uvicorn's closing races it."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.how = how

    def answer(self, request: Request) -> Reply:
        key = request.key
        if key is not None and (len(key) > 255 or not key.isascii()):
            return Reply(500, {"detail": "Internal Server Error"}, then=self.how)
        return super().answer(request)


def report(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def scenarios(path: Path) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in report(path)["scenarios"]}


@pytest.mark.parametrize("how", ["close", "reset"])
def test_a_request_after_a_500_that_dropped_the_connection_goes_on_a_new_one(how: str) -> None:
    toy = CrashesOnOddKeys(how)
    with serving(toy) as url:
        transport = HttpTransport(f"{url}/charges/", {"Authorization": "alice"})
        try:
            crashed = transport.send({"Idempotency-Key": "x" * 300}, b"{}")
            after = transport.send({"Idempotency-Key": "k-1"}, b'{"amount": 1}')
        finally:
            transport.close()
    assert crashed.status == 500
    assert after.status == 201, after.show()  # 0 ("no answer") on the dead connection before
    assert json.loads(after.body) == {"id": 1, "amount": 1}
    assert after.note.startswith("on a new connection, the first dropped: "), after.note


@pytest.mark.parametrize("how", ["close", "reset"])
def test_a_server_dropping_its_connections_after_500s_gets_a_table_and_a_json_report(
    how: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "results.json"
    with serving(CrashesOnOddKeys(how)) as url:
        argv = [f"{url}/charges/", *CALLERS, "--count-url", f"{url}/count/"]
        # Before: ReadError / RemoteProtocolError from the count URL, a traceback, no table.
        assert main([*argv, "--json", str(out)]) == 1
    printed = capsys.readouterr().out
    assert "passed," in printed.splitlines()[-1]
    found = scenarios(out)
    assert found["key-oversized-400"]["verdict"] == "fail"  # the 500 is the server's answer
    assert "got 500" in found["key-oversized-400"]["evidence"][-2]
    for scenario in found.values():
        assert not any("no answer" in line for line in scenario["evidence"]), scenario
    assert found["replay"]["verdict"] == found["storm"]["verdict"] == "pass"


class CountFails(Toy):
    """The count URL answers once (the runner's check at start-up), then ``fault``."""

    def __init__(self, fault: str) -> None:
        super().__init__()
        self.fault, self.reads = fault, 0

    def count(self, request: Request) -> Reply:
        self.reads += 1
        if self.reads == 1:
            return super().count(request)
        if self.fault == "500":
            return Reply(500, {"status": 500}, PROBLEM)
        return Reply(0, then=self.fault)


@pytest.mark.parametrize("fault", ["500", "reset", "close"])
def test_a_count_url_that_fails_mid_run_is_reported_in_the_verdicts_not_a_crash(
    fault: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "results.json"
    with serving(CountFails(fault)) as url:
        argv = [f"{url}/charges/", "--count-url", f"{url}/count/", "--json", str(out)]
        main(argv)
    found = scenarios(out)
    replay = found["replay"]
    assert replay["verdict"] == "not run", replay
    assert "--count-url" in replay["evidence"][-2]
    assert "could not be counted" in replay["evidence"][-2]
    assert "not run" in capsys.readouterr().out.splitlines()[-1]


class Holds(Toy):
    """Every POST waits until the test ends: longer than any ``--timeout`` it is given."""

    def __init__(self) -> None:
        super().__init__()
        self.released = threading.Event()

    def answer(self, request: Request) -> Reply:
        self.released.wait()
        return Reply(503, {"status": 503}, PROBLEM)


@pytest.fixture
def holding() -> Iterator[tuple[Holds, str]]:
    toy = Holds()
    with serving(toy) as url:
        try:
            yield toy, url
        finally:
            toy.released.set()


def test_a_request_outlasting_the_timeout_is_a_timeout_naming_the_flag_and_the_time(
    holding: tuple[Holds, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, url = holding
    out = tmp_path / "results.json"
    assert main([f"{url}/charges/", "--timeout", "0.3", "--json", str(out)]) == 1
    found = scenarios(out)
    replay = found["replay"]
    assert replay["verdict"] == "timeout", replay  # "fail", "no answer (ReadTimeout", before
    assert "--timeout 0.3" in replay["evidence"][-2]
    assert "raise --timeout" in replay["evidence"][-2]
    assert {s["verdict"] for s in found.values()} <= {"timeout", "not run"}
    assert report(out)["passed"] is False
    printed = capsys.readouterr().out
    assert "TIMEOUT  replay" in printed
    assert "timed out" in printed.splitlines()[-1]
