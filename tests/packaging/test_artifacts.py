"""The wheel and the sdist as a release would publish them."""

from __future__ import annotations

import re
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.packaging.conftest import ROOT, Dist, Venv, run

pytestmark = pytest.mark.packaging

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# The first setuptools release that reads PEP 639 `license` / `license-files`
# (77.0.0 was yanked): the floor `requires = ["setuptools>=77"]` promises.
SETUPTOOLS_FLOOR = "77.0.1"


def wheel_names(dist: Dist) -> set[str]:
    with zipfile.ZipFile(dist.wheel) as wheel:
        return set(wheel.namelist())


def sdist_names(dist: Dist) -> set[str]:
    with tarfile.open(dist.sdist) as sdist:
        return {name.partition("/")[2] for name in sdist.getnames()}


def test_twine_check_passes_on_both(dist: Dist) -> None:
    run([sys.executable, "-m", "twine", "check", "--strict", str(dist.sdist), str(dist.wheel)])


def package_files() -> set[str]:
    """Every file of the package in this tree: modules, migrations, templates, static files."""
    tree = ROOT / "idempotency_django"
    return {
        path.relative_to(ROOT).as_posix()
        for path in tree.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }


def test_wheel_holds_the_whole_package_its_licence_and_no_tests(dist: Dist) -> None:
    names = wheel_names(dist)
    dist_info = f"idempotency_django-{PYPROJECT['project']['version']}.dist-info"
    assert f"{dist_info}/licenses/LICENSE" in names
    assert "idempotency_django/py.typed" in names
    missing = package_files() - names
    assert not missing, f"not in the wheel (package-data?): {sorted(missing)}"
    assert {name.partition("/")[0] for name in names} == {"idempotency_django", dist_info}


def test_sdist_holds_the_package_and_its_licence_but_not_the_tests(dist: Dist) -> None:
    # The suite needs the repository around it (tests/testapp, sample_project, docs)
    # and services: it is run from a clone (docs/contributing.rst), never half-shipped.
    names = sdist_names(dist)
    assert {"LICENSE", "README.rst", "CHANGELOG.rst", "pyproject.toml", "PKG-INFO"} <= names
    assert "idempotency_django/py.typed" in names
    tops = {name.partition("/")[0] for name in names if "/" in name}
    assert tops == {"idempotency_django", "idempotency_django.egg-info"}


def test_the_sdist_builds_with_the_floor_setuptools(dist: Dist, tmp_path: Path) -> None:
    assert PYPROJECT["build-system"]["requires"] == ["setuptools>=77"]
    with tarfile.open(dist.sdist) as sdist:
        sdist.extractall(tmp_path / "src", filter="data")
    [source] = (tmp_path / "src").iterdir()
    venv = Venv(tmp_path / "floor")
    venv.pip_install(f"setuptools=={SETUPTOOLS_FLOOR}")
    pip_wheel = [venv.bin("python"), "-m", "pip", "wheel", "-q", "--no-build-isolation"]
    run([*pip_wheel, "--no-deps", "-w", str(tmp_path / "out"), str(source)])
    assert len(list((tmp_path / "out").glob("idempotency_django-*.whl"))) == 1


def test_dev_and_test_tools_are_groups_not_published_extras() -> None:
    assert {"test", "dev"} <= set(PYPROJECT["dependency-groups"])
    assert not {"test", "dev", "docs"} & set(PYPROJECT["project"]["optional-dependencies"])


def test_every_extra_is_in_the_install_docs() -> None:
    page = ROOT / "docs" / "installation.rst"
    assert page.is_file(), "docs/installation.rst, the install docs, is missing"
    listed = set(re.findall(r"\[([a-z,]+)\]", page.read_text()))
    listed = {extra for group in listed for extra in group.split(",")}
    missing = set(PYPROJECT["project"]["optional-dependencies"]) - listed
    assert not missing, f"extras missing from docs/installation.rst: {sorted(missing)}"


def test_the_celery_extra_can_publish_to_a_redis_broker() -> None:
    """kombu's Redis transport imports redis and packaging: only celery[redis] brings both."""
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert any(r.startswith("celery[redis]") for r in extras["celery"])
