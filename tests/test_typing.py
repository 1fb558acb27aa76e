"""Strict mypy, with django-stubs and drf-stubs, accepts the typed access to the context."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# What the accessor replaces: DRF's Request declares no ``idempotency``.
UNTYPED = """
from rest_framework.response import Response
from rest_framework.views import APIView

from idempotency_django.rest_framework import IdempotentMixin


class ChargeView(IdempotentMixin, APIView):
    def post(self, request: object) -> Response:
        return Response({"key": self.request.idempotency.derive("provider")})
"""


def test_strict_mypy_accepts_the_accessor_and_rejects_the_attribute(tmp_path: Path) -> None:
    needed = ("mypy", "mypy_django_plugin", "mypy_drf_plugin")
    if any(importlib.util.find_spec(name) is None for name in needed):
        # Dev tools, not a service: the tox matrix installs the test group only.
        pytest.skip("mypy and the Django/DRF stubs are not installed (the dev group)")
    # Outside tests.*: pyproject's relaxed overrides for tests don't apply to them.
    shutil.copy(ROOT / "tests" / "typed" / "views.py", tmp_path / "typed_views.py")
    (tmp_path / "untyped_views.py").write_text(UNTYPED)
    result = subprocess.run(
        [
            *(
                sys.executable,
                "-m",
                "mypy",
                "--strict",
                "--config-file",
                str(ROOT / "pyproject.toml"),
            ),
            *(str(tmp_path / "typed_views.py"), str(tmp_path / "untyped_views.py")),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert all("untyped_views.py" in line for line in errors), result.stdout
    assert any('"Request" has no attribute "idempotency"' in line for line in errors), result.stdout
