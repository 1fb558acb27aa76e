"""``idempotency-conformance``: a command of its own, for any server, with no Django settings.

The console script is the command line's ``main``; ``--help`` imports neither Django nor
httpx (it starts at once), and a whole run needs no Django settings. Each in a new
process without ``DJANGO_SETTINGS_MODULE``; the packaging tier runs the installed script
in a new virtualenv (tests/packaging/test_first_contact.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from importlib import import_module
from pathlib import Path

import pytest

from idempotency_django.conformance import cli
from tests.conformance.toy_http import Toy, serving

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
# What pip's generated script does with the entry point, in a process without settings.
AS_INSTALLED = """
import json, sys
from importlib import import_module
module, _, name = {target!r}.partition(":")
sys.argv = ["idempotency-conformance", *{argv!r}]
try:
    code = getattr(import_module(module), name)()
except SystemExit as exit_:
    code = exit_.code
loaded = sorted({{m.split(".")[0] for m in sys.modules}} & {{"django", "httpx"}})
print(json.dumps({{"code": code, "loaded": loaded}}), file=sys.stderr)
"""


def as_installed(*argv: str) -> tuple[dict[str, object], str]:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    code = AS_INSTALLED.format(target=SCRIPT["idempotency-conformance"], argv=list(argv))
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    outcome: dict[str, object] = json.loads(done.stderr.strip().splitlines()[-1])
    return outcome, done.stdout


def test_the_console_script_is_the_command_lines_main() -> None:
    module, _, name = SCRIPT["idempotency-conformance"].partition(":")
    assert getattr(import_module(module), name) is cli.main


def test_help_needs_no_settings_and_imports_neither_django_nor_httpx() -> None:
    outcome, printed = as_installed("--help")
    assert outcome == {"code": 0, "loaded": []}, outcome  # before: no script; django loaded
    assert printed.startswith("usage: idempotency-conformance ")
    for flag in ("--timeout", "--profile", "--marked-retry", "--hooks", "--count-url"):
        assert flag in printed


def test_a_whole_run_needs_no_django_settings(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    with serving(Toy()) as url:
        argv = [f"{url}/charges/", "--profile", "draft", "--count-url", f"{url}/count/"]
        outcome, printed = as_installed(*argv, "--json", str(out))
    assert outcome == {"code": 0, "loaded": ["httpx"]}, (outcome, printed)
    assert json.loads(out.read_text())["passed"] is True
    assert ", 0 failed, " in printed.splitlines()[-1], printed


def test_without_httpx_it_says_which_extra_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delitem(sys.modules, "idempotency_django.conformance.http", raising=False)
    monkeypatch.setitem(sys.modules, "httpx", None)
    assert cli.main(["http://127.0.0.1:9/charges/"]) == cli.USAGE_ERROR
    assert 'pip install "idempotency-django[conformance]"' in capsys.readouterr().err
