"""``python -m idempotency_django.conformance URL``: black-box, over real HTTP (httpx).

The toys are served by Django's live server thread (a threaded WSGI server in this
process): the runner sees only HTTP. It fails one with no protection, one whose
check-then-act lets a storm double-charge, and one behind a "proxy" dropping the
key; its exit status and JSON say so (it passes the served sample project:
test_sample_served.py).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings

from idempotency_django.conformance.cli import main, parser
from idempotency_django.conformance.http import parse_count
from idempotency_django.conformance.scenarios import Answer, Options, Run, diagnose

# The runner's judgement does not depend on the database: one tier runs it (CI's time);
# the matrix (test_matrix.py) runs the protected views on every database.
ON_SQLITE = pytest.mark.skipif(
    not settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"),
    reason="the runner's judgement of toys runs on the SQLite tier",
)

pytestmark = [
    ON_SQLITE,
    pytest.mark.urls("tests.conformance.urls"),
    pytest.mark.usefixtures("hooks_on"),
]

ROOT = Path(__file__).resolve().parents[2]


def _verdicts(path: Path) -> dict[str, str]:
    data = json.loads(path.read_text())
    return {s["name"]: s["verdict"] for s in data["scenarios"]}


@pytest.mark.parametrize(
    ("path", "failing"),
    [("/toys/unprotected/", "replay"), ("/toys/check-then-act/", "storm")],
)
def test_a_broken_endpoint_fails_and_exits_1(
    http_server: str, tmp_path: Path, path: str, failing: str
) -> None:
    out = tmp_path / "results.json"
    assert main([http_server + path, "--json", str(out)]) == 1
    verdicts = _verdicts(out)
    assert verdicts[failing] == "fail"
    assert verdicts["other-caller"] == "not run"


def test_the_module_runs_as_a_command(http_server: str) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "idempotency_django.conformance",
            f"{http_server}/toys/unprotected/",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAIL     replay" in done.stdout


def test_a_dropped_key_header_is_named_in_the_evidence(http_server: str, tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    assert main([f"{http_server}/toys/drops-key/", "--json", str(out)]) == 1
    (replay,) = (s for s in json.loads(out.read_text())["scenarios"] if s["name"] == "replay")
    assert replay["verdict"] == "fail"
    assert "a proxy or load balancer dropped it" in replay["evidence"][0]


def test_the_other_hints_name_their_cause() -> None:
    run = Run(None, Options())  # type: ignore[arg-type]
    refused = Answer(401, {}, b"{}")
    assert "credentials" in diagnose(refused, run)
    assert "--id-field" in diagnose(Answer(201, {}, b'{"pk": 1}'), run)
    assert "did not answer" in diagnose(Answer(0, {}, b"", "ConnectError"), run)


@pytest.mark.parametrize(
    "argv",
    [
        ["http://x/", "--header", "no colon"],
        ["http://x/", "--body", "[1]"],
        ["http://x/", "--body", "{"],
        ["http://x/", "--profile", "lenient"],
        ["http://x/", "--key-format", "ulid"],
        ["http://x/", "--timeout", "0"],
        ["http://x/", "--timeout", "soon"],
    ],
)
def test_bad_arguments_are_usage_errors(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        parser().parse_args(argv)
    assert exit_.value.code == 2


def test_python_dash_m_calls_main(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import runpy

    monkeypatch.setattr(sys, "argv", ["conformance", "--help"])
    with pytest.raises(SystemExit) as exit_:
        runpy.run_module("idempotency_django.conformance", run_name="__main__")
    assert exit_.value.code == 0
    assert "--other-caller-header" in capsys.readouterr().out


def test_the_count_url_reads_back_executions_that_a_stamped_replay_hides(
    http_server: str, tmp_path: Path
) -> None:
    out = tmp_path / "results.json"
    argv = [f"{http_server}/toys/reexecutes-stamping-replayed/", "--json", str(out)]
    assert main([*argv, "--count-url", f"{http_server}/count/"]) == 1
    (replay,) = (s for s in json.loads(out.read_text())["scenarios"] if s["name"] == "replay")
    assert replay["verdict"] == "fail"
    assert "the retries ran the view: executions went from" in replay["evidence"][-2]


def test_an_endpoint_keyed_by_another_header_passes_with_key_header(
    http_server: str, tmp_path: Path
) -> None:
    out = tmp_path / "results.json"
    argv = [f"{http_server}/others/keyed-by-request-id/", "--key-header", "X-Request-ID"]
    argv += ["--key-format", "uuid", "--count-url", f"{http_server}/count/", "--json", str(out)]
    assert main(argv) == 0, out.read_text()
    assert _verdicts(out)["replay"] == "pass"


def test_an_unreadable_count_url_is_a_usage_error(
    http_server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"{http_server}/conformance/function/"
    assert main([url, "--count-url", f"{http_server}/no-such-count/"]) == 2
    assert "--count-url" in capsys.readouterr().err


@pytest.mark.parametrize(("text", "count"), [(b"7", 7), (b' {"count": 12} ', 12)])
def test_the_count_url_answers_a_bare_integer_or_a_count_object(text: bytes, count: int) -> None:
    assert parse_count(text) == count


@pytest.mark.parametrize("text", [b"", b"seven", b'{"total": 3}', b"[1]", b"true"])
def test_a_count_url_answering_anything_else_is_refused(text: bytes) -> None:
    with pytest.raises(ValueError):
        parse_count(text)


UNCOUNTED = "needs integer ids in --id-field, or --count-url"


def test_without_a_count_url_string_ids_leave_the_counting_scenarios_not_run_and_exit_0(
    http_server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "results.json"
    assert main([f"{http_server}/others/string-ids/", "--json", str(out)]) == 0
    scenarios = {s["name"]: s for s in json.loads(out.read_text())["scenarios"]}
    for name in ("replay", "mismatch-422", "storm"):
        assert scenarios[name]["verdict"] == "not run", scenarios[name]
        assert UNCOUNTED in scenarios[name]["evidence"][-2]
    printed = capsys.readouterr().out
    assert "----     replay" in printed
    assert UNCOUNTED in " ".join(printed.split())


def test_a_stamped_replay_with_string_ids_is_not_run_without_a_count_url_and_fails_with_one(
    http_server: str, tmp_path: Path
) -> None:
    out = tmp_path / "results.json"
    argv = [f"{http_server}/toys/reexecutes-stamping-replayed-string-ids/", "--json", str(out)]
    # It fails mismatch-422 anyway (another body gets the first answer): exit 1.
    assert main(argv) == 1
    verdicts = _verdicts(out)
    assert verdicts["replay"] == verdicts["storm"] == "not run"
    assert verdicts["mismatch-422"] == "fail"
    assert main([*argv, "--count-url", f"{http_server}/count/"]) == 1
    verdicts = _verdicts(out)
    assert verdicts["replay"] == verdicts["storm"] == "fail"


@pytest.fixture
def refusing_url() -> Iterator[str]:
    """A URL whose port is bound but not listening: every connection is refused at once."""
    with socket.socket() as bound:
        bound.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{bound.getsockname()[1]}/charges/"


def test_an_endpoint_that_does_not_answer_fails_and_the_table_says_why(
    refusing_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([refusing_url]) == 1
    printed = " ".join(capsys.readouterr().out.split())
    assert "FAIL replay" in printed
    assert "no answer (ConnectError" in printed
    assert "the server did not answer" in printed


def test_an_unreachable_count_url_is_a_usage_error(
    refusing_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([refusing_url, "--count-url", refusing_url]) == 2
    assert f"--count-url {refusing_url}: ConnectError" in capsys.readouterr().err


def test_the_body_given_is_the_one_sent() -> None:
    args = parser().parse_args(["http://x/", "--body", '{"sku": "tea", "amount": 5}'])
    assert args.body == {"sku": "tea", "amount": 5}
