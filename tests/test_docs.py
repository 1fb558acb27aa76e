"""The documentation builds without a warning, and every problem ``type`` URI resolves in it."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

import idempotency_django
from idempotency_django.exceptions import ALL_ERRORS, PROBLEM_BASE, IdempotencyError
from tests.conftest import service_missing

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PACKAGE = Path(idempotency_django.__file__).resolve().parent  # the installed one under tox
SITE = "https://idempotency-django.readthedocs.io/en/latest/"


@pytest.fixture(scope="module")
def built_docs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``make docs`` into a scratch directory: ``-W``, so any warning fails the build."""
    if importlib.util.find_spec("sphinx") is None:
        service_missing("Sphinx is not installed (pip install -e '.[docs]')")
    out = tmp_path_factory.mktemp("docs")
    command = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html"]
    result = subprocess.run(
        [*command, "-d", str(out / ".doctrees"), str(DOCS), str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def html_ids(page: Path) -> set[str]:
    return set(re.findall(r'\bid="([^"]+)"', page.read_text(encoding="utf-8")))


def test_problem_types_point_into_the_docs_site() -> None:
    assert PROBLEM_BASE.startswith(SITE)
    assert urlsplit(PROBLEM_BASE + "x").fragment == "x"


@pytest.mark.parametrize("error", ALL_ERRORS, ids=lambda error: error.code)
def test_problem_type_anchor_exists(error: type[IdempotencyError], built_docs: Path) -> None:
    uri = urlsplit(error().type_uri)
    page = built_docs / uri.path.removeprefix(urlsplit(SITE).path)
    assert page.is_file(), f"{error.__name__}: {page.name} is not a page of the docs"
    assert uri.fragment == error.code
    assert uri.fragment in html_ids(page), f"{error.__name__}: no #{uri.fragment} in {page.name}"


def test_every_page_is_in_the_toctree(built_docs: Path) -> None:
    index = (built_docs / "index.html").read_text(encoding="utf-8")
    for source in DOCS.glob("*.rst"):
        if source.stem != "index":
            assert f'href="{source.stem}.html"' in index, f"{source.name} is not linked from index"


def package_literals(pattern: str) -> set[str]:
    """Every string literal of the package's source matching ``pattern``."""
    found: set[str] = set()
    for source in PACKAGE.rglob("*.py"):
        found |= set(re.findall(rf'"({pattern})"', source.read_text(encoding="utf-8")))
    return found


def test_every_setting_has_a_heading(built_docs: Path) -> None:
    names = package_literals(r"IDEMPOTENCY_[A-Z_]+")
    assert "IDEMPOTENCY_TTL" in names
    ids = html_ids(built_docs / "settings.html")
    missing = sorted(name for name in names if f"setting-{name}" not in ids)
    assert not missing, f"add a '.. setting::' heading to docs/settings.rst for {missing}"


def test_every_check_id_is_documented(built_docs: Path) -> None:
    check_ids = package_literals(r"[EW]\d{3}")
    assert "E001" in check_ids
    page = (built_docs / "settings.html").read_text(encoding="utf-8")
    missing = sorted(i for i in check_ids if f"idempotency_django.{i}" not in page)
    assert not missing, f"name these check ids in docs/settings.rst: {missing}"


def test_the_settings_pages_list_of_deployment_warnings_names_each() -> None:
    """0.5's list of what ``check --deploy`` adds left out W151 (named under its setting only)."""
    sources = (PACKAGE / "_operations" / "deploy_checks.py", PACKAGE / "outbox" / "checks.py")
    ids = {i for path in sources for i in re.findall(r'"(W\d{3})"', path.read_text())}
    assert "W151" in ids
    listed = (DOCS / "settings.rst").read_text().split(".. setting::", 1)[0]
    assert not sorted(i for i in ids if f"idempotency_django.{i}" not in listed)


def test_every_check_hint_points_at_an_anchor_of_the_docs(built_docs: Path) -> None:
    from idempotency_django._operations import deploy_checks as d
    from idempotency_django.outbox.checks import check_relay_scheduled

    messages = [
        *d.check_unknown(["IDEMPOTENCY_REQUIRD"]),
        *d.check_purge_scheduled(False),
        *d.check_cache_backend("replay", "django.core.cache.backends.locmem.LocMemCache"),
        *d.check_idle_timeout_kept(None, "postgresql"),
        *d.check_entries_on_sqlite("default", "sqlite"),
        *check_relay_scheduled(False),
        *d.check_tasks_not_eager(True),
        *d.check_cache_read_raw(
            "replay", "django.core.cache.backends.memcached.PyMemcacheCache", False
        ),
    ]
    assert len(messages) == 8
    for message in messages:
        uri = urlsplit((message.hint or "").rsplit(" ", 1)[-1])
        page = built_docs / uri.path.removeprefix(urlsplit(SITE).path)
        assert uri.fragment in html_ids(page), f"{message.id}: no #{uri.fragment} in {page.name}"


def python_blocks(page: Path) -> list[str]:
    """The ``.. code-block:: python`` bodies of an RST page, dedented."""
    blocks = re.findall(r"\.\. code-block:: python\n\n((?:    .*\n|\n)+)", page.read_text())
    return [re.sub(r"(?m)^    ", "", block).strip() for block in blocks]


def test_the_docs_index_example_is_the_readmes() -> None:
    def example(page: Path) -> str:
        return next(b for b in python_blocks(page) if "def create_charge" in b)

    index = example(DOCS / "index.rst")
    assert index == example(ROOT / "README.rst")
    assert "@csrf_exempt" in index
    assert "@require_POST" in index
