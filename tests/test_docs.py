"""The documentation builds without a warning, and every problem ``type`` URI resolves in it."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from idempotency_django.exceptions import ALL_ERRORS, PROBLEM_BASE, IdempotencyError
from tests.conftest import service_missing

DOCS = Path(__file__).resolve().parent.parent / "docs"
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
