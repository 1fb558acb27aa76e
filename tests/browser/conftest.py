"""The browser tier: the real sample project under ``runserver``, driven by headless Chromium.

The sample runs as it does for ``make run`` (its own settings), in a subprocess on a
free port, on a scratch database of the suite's kind: a SQLite file, or a PostgreSQL
database of its own when ``DATABASE_URL`` names PostgreSQL. Debian's chromium and
chromium-driver drive it through Selenium; without them the tier is skipped locally
and fails under CI.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.conf import settings
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from tests.conftest import DATABASE_ONLY, database_vendor, service_missing

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "build" / "screenshots"
STARTUP = 30.0  # seconds the sample may take to answer its first request


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "browser: drives the sample in headless Chromium")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The sample runs on SQLite unless the pass is PostgreSQL's (sample_database below):
    # in MariaDB's pass its browser tests would be the SQLite pass's again.
    if not (DATABASE_ONLY and database_vendor() == "mysql"):
        return
    again = [item for item in items if item.get_closest_marker("browser")]
    if again:
        config.hook.pytest_deselected(items=again)
        items[:] = [item for item in items if item not in again]


@dataclass(frozen=True)
class Sample:
    url: str
    log: Path

    def posts(self, path: str) -> int:
        """How many POSTs to ``path`` reached the server, from runserver's log."""
        return self.log.read_text().count(f'"POST {path} HTTP/1.1"')


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _environment(database_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DJANGO_SETTINGS_MODULE")}
    env.update(DATABASE_URL=database_url, PYTHONUNBUFFERED="1")
    env["DJANGO_SETTINGS_MODULE"] = "sample_project.settings"
    return env


def _wait_until_up(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + STARTUP
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the sample exited with {process.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.2)
    pytest.fail(f"the sample did not answer {url} within {STARTUP} s:\n{log.read_text()}")


@pytest.fixture(scope="session")
def sample_database(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The scratch database's URL, migrated."""
    if not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"):
        url = f"sqlite:///{tmp_path_factory.mktemp('sample') / 'sample.sqlite3'}"
        migrate = [sys.executable, str(ROOT / "manage.py"), "migrate", "-v0"]
        subprocess.run(migrate, env=_environment(url), check=True, cwd=ROOT)
        yield url
        return
    from tests.system.harness import ScratchDatabase

    database = ScratchDatabase.tagged(settings.DATABASE_URL, "browser")
    database.create()
    try:
        yield database.url
    finally:
        database.drop()


@pytest.fixture(scope="session")
def sample(tmp_path_factory: pytest.TempPathFactory, sample_database: str) -> Iterator[Sample]:
    folder = tmp_path_factory.mktemp("runserver")
    env, manage = _environment(sample_database), str(ROOT / "manage.py")
    port, log = free_port(), folder / "runserver.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, manage, "runserver", "--noreload", f"127.0.0.1:{port}"],
            env=env,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_until_up(f"http://127.0.0.1:{port}/checkout/", process, log)
        yield Sample(f"http://127.0.0.1:{port}", log)
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture(scope="session")
def browser() -> Iterator[webdriver.Chrome]:
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver is None:
        service_missing(
            "Chromium is not installed (apt-get install chromium chromium-driver): "
            "the browser tests need it"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = str(chromium)
    # Network events, and the console (the demo asserts it stays free of errors).
    options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",  # the demo is checked, and screenshot, at 1280 px
    ):
        options.add_argument(argument)
    chrome = webdriver.Chrome(options=options, service=Service(executable_path=str(driver)))
    try:
        yield chrome
    finally:
        chrome.quit()


@pytest.fixture
def screenshot(browser: webdriver.Chrome) -> Callable[[str], Path]:
    """Save the page as ``build/screenshots/<name>.png``, for a person to look at."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    def take(name: str) -> Path:
        path = SCREENSHOTS / f"{name}.png"
        browser.save_screenshot(str(path))
        return path

    return take
