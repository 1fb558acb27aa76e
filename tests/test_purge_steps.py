"""Feature apps contribute their own purge step; the core imports none of them."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import idempotency_django
from idempotency_django import purge

pytestmark = pytest.mark.django_db
PACKAGE = Path(idempotency_django.__file__).resolve().parent
# The optional apps: each may import the core, never the other way round.
FEATURES = ("idempotency_django.outbox", "idempotency_django.contrib")


def imported_modules(source: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)


def core_modules() -> Iterator[Path]:
    for source in PACKAGE.rglob("*.py"):
        relative = source.relative_to(PACKAGE).parts
        if relative[0] not in ("outbox", "contrib", "migrations"):
            yield source


@pytest.mark.parametrize("source", sorted(core_modules()), ids=lambda p: p.name)
def test_the_core_imports_no_feature_app(source: Path) -> None:
    found = [m for m in imported_modules(source) if m.startswith(FEATURES)]
    assert not found, f"{source.name} imports {found}: register a step/hook from the app instead"


def test_the_outbox_registers_its_step_from_its_app_config() -> None:
    assert "sent outbox rows" in purge._steps


def test_a_registered_step_runs_with_every_purge_but_a_dry_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[str, int]] = []

    def step(alias: str, batch_size: int) -> int:
        calls.append((alias, batch_size))
        return 3

    monkeypatch.setattr(purge, "_steps", {})
    purge.register_step("widgets", step)
    purge.register_step("widgets", step)  # ready() twice: still one step
    purge.purge(dry_run=True)
    assert calls == []
    purge.purge(batch_size=7)
    assert calls == [("default", 7)]
