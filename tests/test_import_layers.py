"""The package's lowest rooms need nothing above them, its base holds no import circle, and
its private layers import one way down (docs/contributing.rst, "The layout").

0.3 hid a six-module circle behind function-level imports: ``conf`` → ``databases`` →
``models`` → ``keys`` → ``secret`` → ``conf``, with ``signals`` → ``secret``. Every
import counts here, at module level, inside a function or under ``TYPE_CHECKING``:
a circle hidden by a late import is still a circle.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import idempotency_django

pytestmark = pytest.mark.versions

PACKAGE = "idempotency_django"
_MODULE_DIRECTIVE = re.compile(r"^\.\. (?:py:)?module:: +(\S+)\s*$", re.MULTILINE)
ROOT = Path(idempotency_django.__file__).parent
# The lowest rooms, and the only rooms of the package each may import.
LOWEST = {"_conf": set(), "exceptions": set(), "_protocol.keys": {"exceptions"}}
BASE = (
    "_conf",
    "exceptions",
    "_protocol.keys",
    "_storage.secret",
    "signals",
    "models",
    "databases",
)


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
    assert "models" in graph["_storage.secret"]


OUTBOX = ("outbox.api", "outbox.backends", "outbox.delivery", "outbox.broker", "outbox.errors")


@pytest.mark.parametrize("room", OUTBOX)
def test_no_outbox_room_is_on_an_import_circle(graph: dict[str, set[str]], room: str) -> None:
    """0.3's ``api`` ↔ ``backends`` ↔ ``delivery`` circle: enqueue, then publish, one way down."""
    rooms = {name: graph[name] & set(OUTBOX) for name in OUTBOX}
    assert room not in _reachable(rooms, room), f"{room} imports itself through others"


# The app's words, which every layer may use: its settings, errors, models, signals, and
# the database choice and key spaces (public, and below the protocol).
WORDS = {"_conf", "exceptions", "models", "signals", "databases", "tenants"}
# What a private layer may import besides its own rooms and the words; nothing else of the
# package (no face, no layer above it). The one exception is named: the answer's value type.
MAY_IMPORT = {
    "_storage": {"_protocol.responses"},
    "_protocol": {"_storage"},
}


def _layer(name: str) -> str:
    return name.split(".")[0]


def _allowed(layer: str, target: str) -> bool:
    if target in WORDS or _layer(target) == layer:
        return True
    return any(target == rule or target.startswith(f"{rule}.") for rule in MAY_IMPORT[layer])


@pytest.mark.parametrize("layer", sorted(MAY_IMPORT))
def test_a_private_layer_imports_only_below_it(graph: dict[str, set[str]], layer: str) -> None:
    """The request's walk goes one way down: a face calls ``_protocol.core``, which asks
    ``_storage`` to read and to record; neither imports a face (``rest_framework``, ...),
    ``_adapters`` or ``_operations``."""
    rooms = [name for name in graph if _layer(name) == layer]
    assert rooms, f"no module in {layer}"
    wrong = {
        room: sorted(t for t in graph[room] if not _allowed(layer, t))
        for room in rooms
        if any(not _allowed(layer, t) for t in graph[room])
    }
    assert not wrong, f"{layer} imports above itself: {wrong}"


def test_the_protocol_leaves_the_seal_to_storage(graph: dict[str, set[str]]) -> None:
    """The protocol asks the store and the replay cache for answers, opened; the seal is
    theirs (the operations' reseal, inspect and checks handle sealed rows as such)."""
    protocol = sorted(name for name in graph if _layer(name) == "_protocol")
    assert [name for name in protocol if "_storage.seal" in graph[name]] == []


def test_the_top_level_holds_the_public_modules_and_folders() -> None:
    """What a newcomer sees first: the public modules, the private layers, Django's places."""
    # The docs beside the tests (tox runs a copy of them against the installed wheel).
    api = (Path(__file__).resolve().parent.parent / "docs" / "api.rst").read_text()
    public = {
        m.removeprefix(f"{PACKAGE}.").split(".")[0]
        for m in _MODULE_DIRECTIVE.findall(api)
        if m != PACKAGE
    }
    django_places = {"apps", "admin", "models", "urls", "views", "forms", "signals", "tasks"}
    top = {path.stem for path in ROOT.glob("*.py") if path.stem != "__init__"}
    internal = sorted(top - public - django_places)
    assert internal == ["_conf"], f"internal modules at the top level: {internal}"


def test_the_orchestrator_asks_the_cache_once_to_read_and_once_to_fill() -> None:
    """``_protocol.core`` uses the replay cache through two calls, each returning a value or
    scheduling the fill: the key's name, its format and its seal stay inside ``_storage``."""
    tree = ast.parse((ROOT / "_protocol" / "core.py").read_text())
    asked = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "cache"
    }
    assert asked == {"replay", "fill_on_commit"}
