"""The hosted docs build, replayed from a clean environment as Read the Docs runs it.

A copy of the tracked files only (a clone has no untracked file), a new virtualenv
of the configured Python, the ``build.jobs.install`` commands of ``.readthedocs.yaml``
as written, then Sphinx as Read the Docs calls it (``-W --keep-going`` for
``fail_on_warning``). ``make docs-clean-env``; needs PyPI.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.packaging.conftest import ROOT, clean_env, run

pytestmark = pytest.mark.packaging


def rtd_config() -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load((ROOT / ".readthedocs.yaml").read_text())
    return config


def tracked_copy(destination: Path) -> Path:
    """The files git tracks, as they are in the work tree: what a clone of this commit holds."""
    listing = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    for name in filter(None, listing.split("\0")):
        source = ROOT / name
        if source.is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)
    return destination


def interpreter(version: str) -> str:
    """The configured ``pythonX.Y`` if installed (pyenv's too), else this Python (printed)."""
    pyenv = sorted(Path.home().glob(f".pyenv/versions/{version}.*/bin/python{version}"))
    found = [str(path) for path in pyenv] or [shutil.which(f"python{version}") or ""]
    return next((path for path in found if path and "shims" not in path), sys.executable)


def sphinx_command(config: dict[str, Any], output: Path) -> list[str]:
    """Read the Docs' own invocation (its build log), with -W for ``fail_on_warning``."""
    sphinx = config["sphinx"]
    warnings = ["-W", "--keep-going"] if sphinx.get("fail_on_warning") else []
    return ["-m", "sphinx", "-T", *warnings, "-b", "html", "-d", str(output / "doctrees")]


def test_the_config_installs_the_docs_group_not_an_extra() -> None:
    config = rtd_config()
    assert "python" not in config, "python.install and build.jobs.install exclude each other"
    commands = config["build"]["jobs"]["install"]
    assert any("--group docs" in command for command in commands)
    assert not any("[docs]" in command for command in commands)


def test_the_docs_build_from_a_clean_environment_as_read_the_docs_builds_them(
    tmp_path: Path,
) -> None:
    config = rtd_config()
    checkout = tracked_copy(tmp_path / "checkout")
    venv = tmp_path / "venv"
    run([interpreter(config["build"]["tools"]["python"]), "-m", "venv", str(venv)])
    env = clean_env(
        PATH=f"{venv / 'bin'}:{clean_env()['PATH']}",
        READTHEDOCS="True",
        READTHEDOCS_OUTPUT=str(tmp_path / "out"),
    )
    for command in config["build"]["jobs"]["install"]:
        run(shlex.split(command), cwd=checkout, env=env)
    python = str(venv / "bin" / "python")
    configuration = checkout / config["sphinx"]["configuration"]
    html = tmp_path / "out" / "html"
    command = [python, *sphinx_command(config, tmp_path / "out")]
    run([*command, str(configuration.parent), str(html)], cwd=configuration.parent, env=env)
    assert (html / "index.html").is_file()
    assert (html / "http.html").is_file()  # the problem type URIs point here
    version = subprocess.run(
        [python, "-c", "import sys; print(sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    print(f"built with Python {version.strip()} in a fresh virtualenv")
