"""The packaging tier's tools: the built artifacts, fresh virtualenvs, a generated project.

Nothing here uses this repository's virtualenv or source tree: the sdist and the
wheel are built once per run (``python -m build``, the wheel from the sdist), or
taken from ``IDEMPOTENCY_TEST_DIST`` (a directory holding both, e.g. ``make dist``'s
``dist/``), and installed with pip, from PyPI, into new virtualenvs.
"""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"
# What the test process has set that a user's shell wouldn't (pytest-django sets the
# settings module; a virtualenv's variables would point at ours).
_NOT_THE_USERS = ("DJANGO_SETTINGS_MODULE", "PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _NOT_THE_USERS}
    return {**env, "PIP_DISABLE_PIP_VERSION_CHECK": "1", **extra}


def run(command: list[str], cwd: Path | None = None, env: Mapping[str, str] | None = None) -> str:
    """Run ``command``; its output, or the test fails showing it."""
    result = subprocess.run(
        command,
        cwd=cwd,
        env=clean_env() if env is None else dict(env),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if result.returncode != 0:
        pytest.fail(
            f"{' '.join(command)} exited {result.returncode}:\n{result.stdout}{result.stderr}"
        )
    return result.stdout


@dataclass(frozen=True)
class Dist:
    sdist: Path
    wheel: Path


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Dist:
    given = os.environ.get("IDEMPOTENCY_TEST_DIST")
    out = Path(given) if given else tmp_path_factory.mktemp("dist")
    if not given:
        run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)])
    [sdist] = out.glob("*.tar.gz")
    [wheel] = out.glob("*.whl")
    return Dist(sdist, wheel)


class Venv:
    """A new virtualenv, with pip; nothing of ours in it until we install it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        run([sys.executable, "-m", "venv", str(path)])

    def bin(self, name: str) -> str:
        return str(self.path / "bin" / name)

    def pip_install(self, *requirements: str) -> None:
        run([self.bin("python"), "-m", "pip", "install", "-q", "--no-input", *requirements])

    def python(self, code: str, cwd: Path | None = None) -> str:
        return run([self.bin("python"), "-c", code], cwd=cwd)

    def distributions(self) -> set[str]:
        code = "import importlib.metadata as m; print(*{d.metadata['Name'].lower() for d in m.distributions()})"
        return set(self.python(code).split())


class Project:
    """``django-admin startproject mysite`` plus ``startapp payments``, given the quick start."""

    def __init__(self, venv: Venv, path: Path, *, drf: bool, ninja: bool = False) -> None:
        self.venv, self.path = venv, path
        path.mkdir()
        run([venv.bin("django-admin"), "startproject", "mysite", str(path)])
        self.manage("startapp", "payments")
        names = ("models", "views", "urls", *(("api", "api_urls") if drf else ()))
        names += ("ninja_api",) if ninja else ()
        for name in names:
            (path / "payments" / f"{name}.py").write_text(example(f"{name}.py"))
        settings = path / "mysite" / "settings.py"
        snippets = ("settings_snippet.py", *(("settings_drf_snippet.py",) if drf else ()))
        snippets += ("settings_ninja_snippet.py",) if ninja else ()
        settings.write_text(settings.read_text() + "".join("\n" + example(s) for s in snippets))
        (path / "mysite" / "urls.py").write_text(example("project_urls.py"))  # as it is
        self.manage("makemigrations", "payments")
        self.manage("migrate", "--noinput")

    def manage(self, *args: str, **env: str) -> str:
        return run(
            [self.venv.bin("python"), "manage.py", *args], cwd=self.path, env=clean_env(**env)
        )


def example(name: str) -> str:
    return (EXAMPLES / name).read_text()


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]  # lower-cased names
    body: bytes

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


class Runserver:
    """``manage.py runserver`` of a project, on a free port, for the test's requests."""

    def __init__(self, project: Project, log: Path) -> None:
        self.project, self.log_path = project, log
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]

    def __enter__(self) -> Runserver:
        self.log = self.log_path.open("wb")
        command = [self.project.venv.bin("python"), "manage.py", "runserver", "--noreload"]
        self.process = subprocess.Popen(
            [*command, f"127.0.0.1:{self.port}"],
            cwd=self.project.path,
            env=clean_env(),
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self._wait_until_listening()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        self.log.close()

    def _wait_until_listening(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            except OSError:
                time.sleep(0.2)
            else:
                return
        self.log.flush()
        pytest.fail(f"runserver did not start:\n{self.log_path.read_text(errors='replace')}")

    def request(self, method: str, path: str, body: bytes = b"", **headers: str) -> Answer:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            names = {k.lower(): v for k, v in response.getheaders()}
            return Answer(response.status, names, response.read())
        finally:
            connection.close()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("first-contact")


def serve(project: Project, log: Path) -> Iterator[Runserver]:
    with Runserver(project, log) as server:
        yield server
