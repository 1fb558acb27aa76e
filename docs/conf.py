"""Sphinx configuration of the idempotency-django documentation (``make docs``)."""

from __future__ import annotations

import sys
from importlib.metadata import version as package_version
from pathlib import Path

import django
from django.conf import settings
from sphinx.application import Sphinx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# autodoc imports the app's modules, which need a configured Django: the smallest
# settings that load the public modules (DRF's for the mixin).
settings.configure(
    INSTALLED_APPS=[
        "django.contrib.auth",
        "django.contrib.contenttypes",
        "rest_framework",
        "idempotency_django",
    ],
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
    DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
    SECRET_KEY="docs-only",
    USE_TZ=True,
)
django.setup()

project = "idempotency-django"
author = "idempotency_django developers"
copyright = "idempotency_django developers"
release = package_version("idempotency-django")
version = ".".join(release.split(".")[:2])

extensions = ["sphinx.ext.autodoc"]
autodoc_member_order = "bysource"
autodoc_typehints = "signature"

# Nitpicky (-n): every reference must resolve, except Python objects outside the
# documented public modules (Django's, DRF's, the standard library's, internal type
# aliases in signatures), which this offline build has no inventory for.
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(?!idempotency_django\.(models|exceptions|purge|rest_framework)\b).*"),
]

# furo: a clean, readable theme whose assets ship inside the wheel (no CDN, so the
# site builds and renders offline), with light/dark modes and a sidebar of every page.
html_theme = "furo"
html_title = f"idempotency-django {release}"
html_static_path: list[str] = []

exclude_patterns = ["_build", "examples", "_generated"]


def setup(app: Sphinx) -> None:
    # ``.. setting:: IDEMPOTENCY_TTL`` targets and ``:setting:`IDEMPOTENCY_TTL``` links,
    # as Django's own documentation has them.
    app.add_object_type("setting", "setting", indextemplate="pair: %s; setting")
