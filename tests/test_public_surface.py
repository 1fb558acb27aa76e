"""The public surface is declared once and kept: what docs/api.rst lists is what the package exports.

A public module is one docs/api.rst declares with ``.. module::``; its public names
are its ``__all__``, and the reference lists exactly those (autodoc or hand-written
directives). Everything else is internal: the docs' examples and the sample project
import none of it, and every import path of the behaviour contract keeps working.
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from django.core.management import get_commands
from django.template import engines
from django.test import override_settings
from django.urls import reverse

from idempotency_django.calls import namespaced
from idempotency_django.models import IdempotencyEntry

# The import paths are what a Python or Django version can break.
pytestmark = pytest.mark.versions

ROOT = Path(__file__).resolve().parent.parent
API = ROOT / "docs" / "api.rst"
PACKAGE = "idempotency_django"
_MODULE = re.compile(r"^\.\. (?:py:)?module:: +(\S+)\s*$", re.MULTILINE)
# An object's description (autodoc or by hand) naming its full dotted path, with the
# further signatures of a description of several (``.. data:: a`` / ``          b``).
_OBJECT = re.compile(
    r"^( *)\.\. (?:py:)?(?:auto)?(?:function|class|exception|data|decorator):: +"
    rf"({PACKAGE}(?:\.\w+)*)(?P<more>[^\n]*(?:\n\1 +{PACKAGE}\.[^\n]*)*)",
    re.MULTILINE,
)
_MORE = re.compile(rf"^ +({PACKAGE}(?:\.\w+)*)", re.MULTILINE)
_DOTTED = re.compile(rf"{PACKAGE}(?:\.\w+)*")

# Every import path of the behaviour contract (SPEC.md), as users write it.
CONTRACT_IMPORTS = [
    "from idempotency_django import idempotent, idempotency_exempt",
    "from idempotency_django import IdempotentRequest, idempotency_of",
    "from idempotency_django import idempotent_call, idempotent_function",
    "from idempotency_django.rest_framework import IdempotentMixin",
    "from idempotency_django.models import IdempotencyEntry",
    "from idempotency_django.tasks import purge_idempotency",
    "from idempotency_django.celery import idempotent_task",
    "from idempotency_django.django_tasks import idempotent_task",
    "from idempotency_django.outbox import enqueue",
    "from idempotency_django import signals",
    "from idempotency_django.ninja import idempotent",
    "from idempotency_django.consumers import consume",
    "from idempotency_django.consumers import celery, kafka, nats, rabbitmq, redis_streams, sqs",
    "from idempotency_django.client import AsyncIdempotentTransport, IdempotentAdapter, IdempotentTransport",
    "from idempotency_django.strawberry import IdempotentExtension",
    "from idempotency_django.graphene import idempotent",
    "from idempotency_django.mcp import idempotent",
    "from idempotency_django.testing import assert_conformance, run_conformance",
    "from idempotency_django.conformance import conformance_hooks",
    "from idempotency_django.views import IdempotentFormMixin",
    "from idempotency_django.admin import IdempotentAdminMixin",
    "from idempotency_django.middleware import IdempotencyMiddleware",
    "import idempotency_django.urls",
]


def documented(text: str) -> dict[str, set[str]]:
    """The public names an API reference lists, by the module it declares them in."""
    names: dict[str, set[str]] = {module: set() for module in _MODULE.findall(text)}
    targets = [
        target
        for match in _OBJECT.finditer(text)
        for target in (match[2], *_MORE.findall(match["more"]))
    ]
    for target in targets:
        owners = [module for module in names if target.startswith(f"{module}.")]
        assert owners, f"docs/api.rst describes {target} outside every declared module"
        module = max(owners, key=len)
        names[module].add(target.removeprefix(f"{module}.").split(".")[0])
    return names


PUBLIC = documented(API.read_text(encoding="utf-8"))


def _exported(module: ModuleType) -> set[str]:
    assert hasattr(module, "__all__"), f"{module.__name__} is public but has no __all__"
    return set(module.__all__)


def _compare(name: str, public: dict[str, set[str]]) -> None:
    exported = _exported(importlib.import_module(name))
    assert not exported - public[name], f"{name} exports names docs/api.rst does not list"
    assert not public[name] - exported, f"docs/api.rst lists names {name} does not export"


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_a_public_module_exports_exactly_what_the_reference_lists(name: str) -> None:
    _compare(name, PUBLIC)


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_every_exported_name_exists(name: str) -> None:
    module = importlib.import_module(name)
    missing = [attribute for attribute in _exported(module) if not hasattr(module, attribute)]
    assert not missing, f"{name}.__all__ names what it does not define: {missing}"


def test_a_name_removed_from_an_all_fails_the_comparison(monkeypatch: pytest.MonkeyPatch) -> None:
    module = importlib.import_module("idempotency_django.outbox")
    monkeypatch.setattr(module, "__all__", [name for name in module.__all__ if name != "enqueue"])
    with pytest.raises(AssertionError, match="does not export"):
        _compare("idempotency_django.outbox", PUBLIC)


def test_a_name_exported_but_not_documented_fails_the_comparison(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    module = importlib.import_module("idempotency_django.outbox")
    monkeypatch.setattr(module, "__all__", [*module.__all__, "delivery"])
    with pytest.raises(AssertionError, match="does not list"):
        _compare("idempotency_django.outbox", PUBLIC)


def test_a_documented_name_that_is_not_exported_fails_the_comparison() -> None:
    text = (
        API.read_text(encoding="utf-8")
        + "\n.. autofunction:: idempotency_django.outbox.relay_now\n"
    )
    with pytest.raises(AssertionError, match="does not export"):
        _compare("idempotency_django.outbox", documented(text))


def test_documenting_an_internal_module_s_name_fails_the_comparison() -> None:
    text = (
        API.read_text(encoding="utf-8") + "\n.. autoclass:: idempotency_django._storage.seal.Ring\n"
    )
    with pytest.raises(AssertionError, match="does not export"):
        _compare(PACKAGE, documented(text))


@pytest.mark.parametrize("statement", CONTRACT_IMPORTS)
def test_every_import_path_of_the_contract_still_imports(statement: str) -> None:
    exec(statement, {})  # the statements are the constants above


@pytest.mark.parametrize("statement", CONTRACT_IMPORTS)
def test_every_import_path_of_the_contract_is_documented(statement: str) -> None:
    tree = ast.parse(statement).body[0]
    if isinstance(tree, ast.Import):
        assert tree.names[0].name in PUBLIC
        return
    assert isinstance(tree, ast.ImportFrom)
    assert tree.module in PUBLIC
    for alias in tree.names:
        assert _is_public(tree.module, alias.name), f"{tree.module}.{alias.name} is not documented"


def test_importing_the_package_imports_no_framework() -> None:
    code = "import sys, idempotency_django; print(sorted({'rest_framework', 'ninja', 'celery'} & set(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert result.stdout.strip() == "[]"


@override_settings(ROOT_URLCONF="tests.testapp.lookup_urls")
def test_the_contract_s_command_urls_and_template_tags_are_there() -> None:
    assert get_commands()["purge_idempotency"] == PACKAGE
    assert reverse("idempotency_django:key-status", kwargs={"key": "k"}).endswith("/keys/k/")
    template = engines["django"].from_string("{% load idempotency %}{% idempotency_key_field %}")
    assert 'name="idempotency_key"' in template.render({})


def _is_public(module: str, name: str) -> bool:
    return name in PUBLIC.get(module, ()) or f"{module}.{name}" in PUBLIC


def _is_public_path(dotted: str) -> bool:
    """A module path, or a name in one (a setting's value, a beat task's name)."""
    if dotted in PUBLIC:
        return True
    module, _, name = dotted.rpartition(".")
    return _is_public(module, name)


def _code_blocks(text: str) -> Iterator[str]:
    """The Python of an rst page's ``code-block:: python`` and ``::`` blocks."""
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        opens = re.match(r"\s*\.\. code-block:: python", line) or (
            line.rstrip().endswith("::") and not line.lstrip().startswith("..")
        )
        if not opens:
            continue
        indent = len(line) - len(line.lstrip())
        while index < len(lines) and (
            not lines[index].strip() or re.match(r"\s+:\w[\w-]*:", lines[index])
        ):
            index += 1
        body = []
        while index < len(lines) and (
            not lines[index].strip() or len(lines[index]) - len(lines[index].lstrip()) > indent
        ):
            body.append(lines[index])
            index += 1
        yield textwrap.dedent("\n".join(body))


def _sources() -> Iterator[tuple[str, str]]:
    for page in sorted((ROOT / "docs").glob("*.rst")):
        for number, block in enumerate(_code_blocks(page.read_text(encoding="utf-8"))):
            yield f"{page.relative_to(ROOT)} block {number}", block
    for path in sorted(
        [*(ROOT / "docs" / "examples").glob("*.py"), *(ROOT / "sample_project").rglob("*.py")]
    ):
        yield str(path.relative_to(ROOT)), path.read_text(encoding="utf-8")


def _package_uses(source: str) -> Iterator[str]:
    """Each of the package's paths ``source`` imports or names in a string."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # a shell session, a traceback, a fragment with "..."
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == PACKAGE:
            yield from (f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name.split(".")[0] == PACKAGE)
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and _DOTTED.fullmatch(node.value)
        ):
            yield node.value


def test_the_docs_and_the_sample_use_only_public_names() -> None:
    internal = sorted(
        f"{where}: {path}"
        for where, source in _sources()
        for path in _package_uses(source)
        if path != PACKAGE and not _is_public_path(path)
    )
    assert not internal, "internal names used by the docs or the sample:\n" + "\n".join(internal)


def test_the_scan_sees_the_docs_and_the_sample() -> None:
    used = {path for _, source in _sources() for path in _package_uses(source)}
    assert {
        "idempotency_django.rest_framework.IdempotentMixin",  # docs/examples, sample
        "idempotency_django.celery.idempotent_task",  # a code-block in a list-table
        "idempotency_django.tenants.user_pk",  # a setting's value in the sample
    } <= used


def test_an_entry_s_readable_key_shows_a_call_s_scope_apart_from_its_key() -> None:
    # What the sample's index shows instead of importing the internal keys.readable.
    assert (
        IdempotencyEntry(key=namespaced("stripe-webhook", "evt_1")).readable_key
        == "[stripe-webhook] evt_1"
    )
    assert IdempotencyEntry(key="k-1").readable_key == "k-1"


def _is_public_reference(target: str) -> bool:
    """A public name, or an attribute of one (``IdempotentMixin.get_idempotency_key``)."""
    return _is_public_path(target) or any(
        target.startswith(f"{module}.") and target[len(module) + 1 :].split(".")[0] in names
        for module, names in PUBLIC.items()
    )


def test_the_docs_cross_references_name_only_public_objects() -> None:
    role = re.compile(rf":(?:py:)?(?:func|class|exc|data|mod|attr|meth|obj):`~?({PACKAGE}[\w.]*)`")
    internal = sorted(
        f"{page.name}: {target}"
        for page in (ROOT / "docs").glob("*.rst")
        for target in role.findall(page.read_text(encoding="utf-8"))
        if not _is_public_reference(target)
    )
    assert not internal, "the docs link to internal names:\n" + "\n".join(internal)
