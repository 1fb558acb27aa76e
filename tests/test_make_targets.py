"""What the Makefile does around the suite, run for real on a copy of it with stand-ins.

The Makefile is copied into a temporary directory; the Python that makes the
virtualenv, the virtualenv's own Python and the service scripts are small shell
scripts that log what they were asked and answer as told. So ``make test`` runs
its whole recipe in well under a second, with tiers failing on demand.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FAILING_URL = "postgres://failing"
# Each tier's lane (tests/tiers.sh).
LANES = {
    "test-postgres-in-process": "A",
    "test-postgres-system": "B",
    "test-sqlite": "C",
    "test-multidb": "C",
    "test-mariadb": "D",
    "test-poolers": "D",
}

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")

PYTHON_STAND_IN = """#!/bin/sh
# Logs each call; answers the version query with {version}; a pytest run whose
# DATABASE_URL is {failing} fails, as a failing tier would.
echo "python $*" >> "{log}"
case "$1" in -c) echo {version}; exit 0;; esac
if [ "$1 $2" = "-m venv" ]; then
  dir=$(eval echo \\${{$#}})
  if [ "$3" = "--clear" ]; then rm -rf "$dir"; fi
  mkdir -p "$dir/bin" && cp "{new_python}" "$dir/bin/python" && chmod +x "$dir/bin/python"
fi
# (The other lanes' PostgreSQL databases are PG_URL's name with a suffix: a prefix fails too.)
if [ "$1 $2 $3" = "-m coverage run" ]; then case "$DATABASE_URL" in {failing}*) exit 1;; esac; fi
exit 0
"""


def _script(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def _python(path: Path, log: Path, version: str, new_python: Path | None = None) -> Path:
    text = PYTHON_STAND_IN.format(
        log=log, version=version, failing=FAILING_URL, new_python=new_python or path
    )
    return _script(path, text)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the Makefile and pyproject.toml, an installed .venv of Python 3.11, and
    service scripts that succeed."""
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    for name in ("up.sh", "pgbouncer.sh"):
        _script(tmp_path / "tests" / "services" / name, "#!/bin/sh\nexit 0\n")
    shutil.copy(ROOT / "tests" / "tiers.sh", tmp_path / "tests" / "tiers.sh")
    log = tmp_path / "calls.log"
    _python(tmp_path / "python3.11", log, "3.11")
    _python(tmp_path / ".venv" / "bin" / "python", log, "3.11")
    (tmp_path / ".venv" / ".installed").touch()
    return tmp_path


def make(project: Path, *args: str, **variables: str) -> subprocess.CompletedProcess[str]:
    # Not the outer make's flags (this test may run under `make test` itself).
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    assignments = [f"{name}={value}" for name, value in variables.items()]
    python = f"PYTHON={project / 'python3.11'}"
    return subprocess.run(
        ["make", "--no-print-directory", *args, python, *assignments],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def calls(project: Path) -> list[str]:
    log = project / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


def test_make_test_runs_every_tier_after_failures_and_names_each_failed_tier(
    project: Path,
) -> None:
    result = make(project, "test", PG_URL=FAILING_URL)
    assert result.returncode != 0
    failed = "test-postgres-in-process test-postgres-system test-multidb test-poolers"
    assert f"make test: these tiers failed: {failed}" in result.stderr
    ran = [line for line in calls(project) if "coverage run" in line]
    # Each tier's time, with its lane.
    times = {
        line.split()[0]: line.split()[1]
        for line in result.stdout.splitlines()
        if line.startswith("test-")
    }
    assert times == LANES
    # Every tier ran: both (failing) PostgreSQL tiers' first steps, SQLite's, MariaDB's,
    # both multi-database steps (SQLite's passes, PostgreSQL's fails), the (failing)
    # PgBouncer pass.
    assert len(ran) == 7, ran
    assert "python -m coverage report" in calls(project)


def test_make_test_passes_when_every_tier_passes_and_reports_coverage(project: Path) -> None:
    result = make(project, "test", PG_URL="postgres://fine")
    assert result.returncode == 0, result.stderr
    assert "failed" not in result.stderr
    log = calls(project)
    assert log[-2:] == ["python -m coverage combine -q", "python -m coverage report"]
    assert len([line for line in log if "coverage run" in line]) == 10


MAKE_STAND_IN = """#!/bin/sh
# Logs each call; fails the calls in FAIL (comma-separated). ``make test`` ends only
# once ``make lint`` has started (or fails after 30 s): run after it, never beside it,
# the chain would never start in time.
if [ "$*" = "test" ]; then
  i=0; while [ ! -e "{started}" ]; do i=$((i+1)); [ $i -gt 600 ] && exit 3; sleep 0.05; done
fi
echo "make $*" >> "{log}"
if [ "$*" = "lint" ]; then touch "{started}"; fi
case ",$FAIL," in *",$*,"*) exit 1;; esac
exit 0
"""

OTHERS = ["lint", "docs", "docs-clean-env", "first-contact", "tox-corners"]


def _ci(tmp_path: Path, fail: str = "") -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """.ci/run, copied, with a stand-in ``make`` first on PATH."""
    shutil.copytree(ROOT / ".ci", tmp_path / ".ci")
    log, started = tmp_path / "make.log", tmp_path / "lint-started"
    _script(tmp_path / "bin" / "make", MAKE_STAND_IN.format(log=log, started=started))
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "FAIL": fail}
    result = subprocess.run(
        ["bash", str(tmp_path / ".ci" / "run")], capture_output=True, text=True, env=env
    )
    return result, log.read_text().splitlines()


def test_ci_provisions_then_runs_the_others_beside_make_test(tmp_path: Path) -> None:
    result, calls_made = _ci(tmp_path)
    assert result.returncode == 0, result.stderr
    assert calls_made[0] == "make services install"
    assert "make test" in calls_made  # it ended: the chain had started beside it
    others = [line.split()[1] for line in calls_made if line.split()[1] in OTHERS]
    assert others == OTHERS  # one chain, in its order
    assert "==== lint, docs" in result.stdout


@pytest.mark.parametrize(
    ("fail", "named"),
    [("test", "make test failed"), ("docs", "lint, docs, first-contact or tox-corners failed")],
)
def test_ci_fails_naming_the_side_that_failed(tmp_path: Path, fail: str, named: str) -> None:
    result, calls_made = _ci(tmp_path, fail=fail)
    assert result.returncode != 0
    assert named in result.stderr
    ran = [line.split()[1] for line in calls_made]
    # One side's failure does not stop the other.
    assert "test" in ran
    assert "lint" in ran
    if fail == "docs":
        assert "first-contact" not in ran  # the chain stops at its first failure


def test_ci_stops_before_the_suite_when_provisioning_fails(tmp_path: Path) -> None:
    result, calls_made = _ci(tmp_path, fail="services install")
    assert result.returncode != 0
    assert calls_made == ["make services install"]


def test_a_venv_made_by_another_python_is_made_again(project: Path) -> None:
    log = project / "calls.log"
    _python(project / ".venv" / "bin" / "python", log, "3.10")
    result = make(project, "install")
    assert result.returncode == 0, result.stderr
    assert "python -m venv --clear .venv" in calls(project)
    assert any("install -q -e . --group dev" in line for line in calls(project))
    assert (project / ".venv" / ".installed").exists()


def test_make_run_makes_a_venv_of_another_python_again(project: Path) -> None:
    _python(project / ".venv" / "bin" / "python", project / "calls.log", "3.10")
    (project / ".venv" / ".sample").touch()
    result = make(project, ".venv/.sample")
    assert result.returncode == 0, result.stderr
    assert "python -m venv --clear .venv" in calls(project)
    assert any("install -q -e . --group sample" in line for line in calls(project))


def test_a_venv_of_the_same_python_is_kept(project: Path) -> None:
    result = make(project, "install")
    assert result.returncode == 0, result.stderr
    assert not [line for line in calls(project) if "venv" in line]


def test_pip_installs_hide_setuptools_editable_notice() -> None:
    """Every pip call goes through ``$(PIP)``, which filters the boxed "Editable installation"
    notice (a setuptools InformationOnly warning pip >= 25 shows even under -q)."""
    makefile = (ROOT / "Makefile").read_text()
    assert 'PIP := PYTHONWARNINGS="ignore:Editable installation" $(PY) -m pip' in makefile
    assert "-m pip install" not in makefile.replace("$(PY) -m pip\n", "")
