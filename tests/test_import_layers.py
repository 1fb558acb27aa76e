"""The package's lowest rooms need nothing above them, and its base holds no import circle.

0.3 hid a six-module circle behind function-level imports: ``conf`` → ``databases`` →
``models`` → ``keys`` → ``secret`` → ``conf``, with ``signals`` → ``secret``. Every
import counts here, at module level, inside a function or under ``TYPE_CHECKING``:
a circle hidden by a late import is still a circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import idempotency_django

pytestmark = pytest.mark.versions

PACKAGE = "idempotency_django"
ROOT = Path(idempotency_django.__file__).parent
# The lowest rooms, and the only rooms of the package each may import.
LOWEST = {"conf": set(), "exceptions": set(), "keys": {"exceptions"}}
BASE = ("conf", "exceptions", "keys", "secret", "signals", "models", "databases")


def _modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules ``name`` imports anywhere in its source (relative names)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    seen: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([PACKAGE, *filter(None, up), *filter(None, [base])])
            targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        else:
            continue
        for target in targets:
            relative = target.removeprefix(f"{PACKAGE}.") if target != PACKAGE else ""
            if target.startswith(PACKAGE) and relative in modules and relative != name:
                seen.add(relative)
    return seen


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) - {""} for name, path in modules.items()}


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = list(graph.get(start, ()))
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(graph.get(name, ()))
    return seen


@pytest.mark.parametrize("room", sorted(LOWEST))
def test_a_lowest_room_imports_nothing_above_it(graph: dict[str, set[str]], room: str) -> None:
    assert graph[room] <= LOWEST[room], f"{room} imports {sorted(graph[room] - LOWEST[room])}"


@pytest.mark.parametrize("room", BASE)
def test_no_base_room_is_on_an_import_circle(graph: dict[str, set[str]], room: str) -> None:
    assert room not in _reachable(graph, room), f"{room} imports itself through others"


def test_the_graph_sees_function_level_imports(graph: dict[str, set[str]]) -> None:
    """``secret`` imports ``models`` only inside functions (the models need the app)."""
    assert "models" in graph["secret"]


OUTBOX = ("outbox.api", "outbox.backends", "outbox.delivery", "outbox.broker", "outbox.errors")


@pytest.mark.parametrize("room", OUTBOX)
def test_no_outbox_room_is_on_an_import_circle(graph: dict[str, set[str]], room: str) -> None:
    """0.3's ``api`` ↔ ``backends`` ↔ ``delivery`` circle: enqueue, then publish, one way down."""
    rooms = {name: graph[name] & set(OUTBOX) for name in OUTBOX}
    assert room not in _reachable(rooms, room), f"{room} imports itself through others"
