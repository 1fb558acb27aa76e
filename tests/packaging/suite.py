"""Copy the test suite, without the package, to run it against an installed wheel.

``python tests/packaging/suite.py DEST`` (tox's ``commands_pre``). pytest puts its
rootdir first on ``sys.path``; run from the repository, ``import idempotency_django``
would find the source tree, not the wheel under test. From the copy it can only
find the installed one, which ``tests/conftest.py`` checks when
``IDEMPOTENCY_TEST_INSTALLED=1``.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# What the tests read besides the package: the docs build and its includes, the sample,
# and what CI runs (the Makefile, .ci/run).
TREES = ("tests", "sample_project", "docs", ".ci")
FILES = ("manage.py", "pyproject.toml", "README.rst", "CHANGELOG.rst", "Makefile")
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.sqlite3", "results", "_build")


def copy_suite(dest: Path) -> None:
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for tree in TREES:
        shutil.copytree(ROOT / tree, dest / tree, ignore=IGNORE)
    for name in FILES:
        shutil.copy2(ROOT / name, dest / name)


if __name__ == "__main__":
    copy_suite(Path(sys.argv[1]))
