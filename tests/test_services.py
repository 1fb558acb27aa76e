"""The service gating of tests/conftest.py: REDIS_URL is honoured, and a required service fails."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

ROOT = Path(__file__).resolve().parent.parent
NOWHERE = "127.0.0.1:9"  # the discard port: nothing listens there
REDIS_NODE = "tests/test_services.py::test_redis_url_fixture_gives_the_configured_url"
SQLITE_NODE = "tests/test_services.py::test_is_postgres_fixture_matches_the_connection"


def test_redis_url_fixture_gives_the_configured_url(redis_url: str) -> None:
    assert redis_url == settings.REDIS_URL


@pytest.mark.every_database
def test_is_postgres_fixture_matches_the_connection(is_postgres: bool) -> None:
    assert is_postgres is settings.DATABASES["default"]["ENGINE"].endswith("postgresql")


def run_pytest(node: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "CI": "", "IDEMPOTENCY_TEST_SERVICES": "optional", **env}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:randomly", node],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_redis_fixture_checks_the_server_of_redis_url_and_skips_when_optional() -> None:
    result = run_pytest(REDIS_NODE, REDIS_URL=f"redis://{NOWHERE}/3")
    assert result.returncode == 0, result.stdout
    assert f"Redis at redis://{NOWHERE}/3 (REDIS_URL) is unreachable" in result.stdout
    assert "1 skipped" in result.stdout


# The second case keeps IDEMPOTENCY_TEST_SERVICES=optional: under CI it can't opt out.
@pytest.mark.parametrize("env", [{"IDEMPOTENCY_TEST_SERVICES": "required"}, {"CI": "true"}])
def test_a_missing_redis_fails_when_services_are_required(env: dict[str, str]) -> None:
    result = run_pytest(REDIS_NODE, REDIS_URL=f"redis://{NOWHERE}/3", **env)
    assert result.returncode == 1, result.stdout
    assert "1 error" in result.stdout
    assert f"Redis at redis://{NOWHERE}/3 (REDIS_URL) is unreachable: services are required" in (
        result.stdout
    )


def test_a_missing_postgresql_fails_the_run_when_services_are_required() -> None:
    url = f"postgres://postgres@{NOWHERE}/nothing"
    result = run_pytest(SQLITE_NODE, DATABASE_URL=url, IDEMPOTENCY_TEST_SERVICES="required")
    assert result.returncode == 1
    assert "PostgreSQL at 127.0.0.1:9 is unreachable: services are required" in (
        result.stdout + result.stderr
    )


def test_a_missing_postgresql_skips_everything_when_optional() -> None:
    result = run_pytest(SQLITE_NODE, DATABASE_URL=f"postgres://postgres@{NOWHERE}/nothing")
    assert result.returncode == 0, result.stdout
    assert "1 skipped" in result.stdout


def test_an_unknown_services_value_is_a_usage_error() -> None:
    result = run_pytest(SQLITE_NODE, IDEMPOTENCY_TEST_SERVICES="sometimes")
    assert result.returncode != 0
    assert 'IDEMPOTENCY_TEST_SERVICES must be "required" or "optional"' in (
        result.stdout + result.stderr
    )


def _provision(tmp_path: Path, services: str) -> subprocess.CompletedProcess[str]:
    """tests/services/up.sh as a non-root user on a machine without Chromium.

    A bin directory holding only the few commands the script uses (no chromium, no
    chromedriver) and an ``id`` that says uid 1000 stand in for such a machine.
    """
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("bash", "seq", "sleep", "grep", "head", "ls", "cat"):
        found = subprocess.run(["which", name], capture_output=True, text=True, check=False)
        if found.returncode == 0:
            (bin_dir / name).symlink_to(found.stdout.strip())
    (bin_dir / "id").write_text("#!/bin/sh\necho 1000\n")
    (bin_dir / "id").chmod(0o755)
    return subprocess.run(
        ["bash", str(ROOT / "tests" / "services" / "up.sh")],
        env={"PATH": str(bin_dir), "SERVICES": services},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_item14_make_test_fails_naming_the_command_that_provisions_a_missing_browser(
    tmp_path: Path,
) -> None:
    result = _provision(tmp_path, "required")
    assert result.returncode == 1
    assert "chromium chromium-driver" in result.stderr
    assert "sudo make services" in result.stderr


def test_item14_a_missing_browser_only_warns_when_services_are_optional(tmp_path: Path) -> None:
    result = _provision(tmp_path, "optional")
    assert result.returncode == 0
    assert "chromium" in result.stderr


def test_item14_make_test_runs_the_provisioning_first() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "\ntest: services install\n" in makefile
    assert "tests/services/up.sh" in makefile
    # CI's own order (provisioning first) is run for real in tests/test_make_targets.py.
