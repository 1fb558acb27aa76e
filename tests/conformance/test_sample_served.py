"""The runner passes the sample project served by gunicorn, on every protocol it offers.

Its function view (``/charges/``), its DRF viewset (``/api/charges/``, two users'
tokens) and its Django Ninja operations, sync and ``async def`` (``/ninja/…``),
each judged black-box by ``python -m idempotency_django.conformance``'s ``main``
with the test hooks on: on PostgreSQL under "lock" and "lease" (the PostgreSQL
tier) and on a SQLite file (the SQLite tier). One tier each: they start real servers.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings

from idempotency_django.conformance.cli import main
from tests.system.harness import CHARGES, ROOT, Gunicorn, ScratchDatabase, sample_env

pytestmark = [pytest.mark.system]

VENDOR = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
TOKENS = (
    "from rest_framework.authtoken.models import Token;"
    "from django.contrib.auth import get_user_model;"
    "users = [get_user_model().objects.get_or_create(username=n)[0] for n in ('conf-a', 'conf-b')];"
    "print(' '.join(Token.objects.get_or_create(user=u)[0].key for u in users))"
)


def _env(database_url: str, protocol: str | None = None) -> dict[str, str]:
    env = sample_env(database_url, lease=10, protocol=protocol)
    env["DJANGO_SETTINGS_MODULE"] = "tests.conformance.served_settings"
    return env


def _manage(database_url: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=_env(database_url),
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return done.stdout


def _served(database_url: str, log: Path, protocol: str | None) -> Gunicorn:
    env = _env(database_url, protocol)
    return Gunicorn("sample_project.wsgi:application", env, ready=(CHARGES, 405), log=log)


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if VENDOR == "sqlite3":
        url = f"sqlite:///{tmp_path_factory.mktemp('served') / 'sample.sqlite3'}"
        _manage(url, "migrate", "--noinput")
        yield url
        return
    if VENDOR != "postgresql":
        pytest.skip("served by the PostgreSQL and SQLite tiers (MariaDB's runs are in-process)")
    scratch = ScratchDatabase.tagged(settings.DATABASE_URL, "conformance")
    scratch.create()
    try:
        yield scratch.url
    finally:
        scratch.drop()


PROTOCOLS = ["lock", "lease"] if VENDOR == "postgresql" else [None]


@pytest.fixture(scope="module", params=PROTOCOLS)
def server(
    request: pytest.FixtureRequest, database: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, list[str], str | None]]:
    tokens = _manage(database, "shell", "-c", TOKENS).strip().splitlines()[-1].split()
    log = tmp_path_factory.mktemp("logs") / "gunicorn.log"
    with _served(database, log, request.param) as gunicorn:
        yield f"http://127.0.0.1:{gunicorn.port}", tokens, request.param


ENDPOINTS = [
    ("/charges/", None, None),
    ("/api/charges/", "Authorization: Token {}", "Authorization: Token {}"),
    ("/ninja/charges", "X-API-Key: {}", "X-API-Key: {}"),
    ("/ninja/async/charges", "X-API-Key: {}", "X-API-Key: {}"),
]


# Every endpoint under "lock"; fewer elsewhere: CI's time.
ELSEWHERE = {"lease": {"/ninja/async/charges"}, None: {"/charges/", "/ninja/async/charges"}}


@pytest.mark.parametrize(("path", "mine", "theirs"), ENDPOINTS)
def test_the_served_sample_passes(
    server: tuple[str, list[str], str | None],
    path: str,
    mine: str | None,
    theirs: str | None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, tokens, protocol = server
    if protocol != "lock" and path not in ELSEWHERE[protocol]:
        pytest.skip('every endpoint is served under "lock"; fewer elsewhere (CI\'s time)')
    out = tmp_path / "results.json"
    argv = [url + path, "--json", str(out)]
    if mine and theirs:
        argv += [
            "--header",
            mine.format(tokens[0]),
            "--other-caller-header",
            theirs.format(tokens[1]),
        ]
    status = main(argv)
    printed = capsys.readouterr()
    assert "storm: 24/24 answered" in printed.err  # progress
    assert "0 failed" in printed.out
    verdicts = {s["name"]: s for s in json.loads(out.read_text())["scenarios"]}
    assert status == 0, verdicts
    expected_not_run = {"other-caller"} if mine is None else set()
    assert {n for n, s in verdicts.items() if s["verdict"] == "not run"} == expected_not_run
