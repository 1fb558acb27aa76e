"""The documentation's examples run as shown (0.2.0 review, item 13)."""

from __future__ import annotations

import ast
import builtins
import importlib.util
import json
import re
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.core.management import call_command
from django.test import AsyncClient, Client, RequestFactory

from idempotency_django._operations.checks import check_sqlite_options
from sample_project.payments.models import Charge as SampleCharge
from tests import dj_tasks
from tests.helpers import new_key
from tests.testapp.models import Charge

DOCS = Path(__file__).resolve().parent.parent / "docs"


def _code_blocks(page: str) -> list[str]:
    """The ``.. code-block:: python`` bodies of a docs page, dedented."""
    text = (DOCS / page).read_text()
    blocks = re.findall(r"\.\. code-block:: python\n\n((?:(?: {4}.*)?\n)+)", text)
    return [re.sub(r"^ {4}", "", block, flags=re.M) for block in blocks]


def _api_webhook() -> Any:
    (block,) = [b for b in _code_blocks("api.rst") if "def stripe_webhook" in b]
    namespace: dict[str, Any] = {}
    exec(compile(block, "docs/api.rst", "exec"), namespace)
    return namespace["stripe_webhook"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "status"),
    [
        ("not json", 400),
        (json.dumps({"id": 12345}), 400),  # a numeric id
        (json.dumps(["evt_1"]), 400),  # JSON, not an object
        (json.dumps({"id": "evt_1"}), 200),
    ],
)
def test_item13_the_api_references_key_extractor_answers_400_not_500(
    body: str, status: int
) -> None:
    """0.2.0: a non-JSON body or a numeric id made ``json.loads(r.body).get("id")`` a 500."""
    view = _api_webhook()
    request = RequestFactory().post("/hook/", body, content_type="application/json")
    response = view(request)
    assert response.status_code == status
    if status == 400:
        assert response["Content-Type"] == "application/problem+json"
        assert json.loads(response.content)["type"].endswith("#key-malformed")


def _names(tree: ast.AST) -> tuple[set[str], set[str]]:
    defined = {
        node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.ClassDef)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            defined |= {alias.asname or alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.Assign):
            defined |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.arg):
            defined.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            defined.add(node.id)
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    return defined, used


def _shown(page: str, source: Path) -> str:
    """What a page's literalinclude of ``source`` shows (``:start-at:`` / ``:pyobject:``)."""
    text = (DOCS / page).read_text()
    code = source.read_text()
    shown = []
    if source.is_relative_to(DOCS):
        included = re.escape(str(source.relative_to(DOCS)))
    else:
        included = r"\.\./" + re.escape(str(source.relative_to(DOCS.parent)))
    for options in re.findall(
        rf"\.\. literalinclude:: {included}\n" r"((?:   :.*\n)+)",
        text,
    ):
        start = re.search(r":start-at: (.*)", options)
        obj = re.search(r":pyobject: (.*)", options)
        if start:
            shown.append(code[code.index(start.group(1)) :])
        elif obj:
            node = next(
                n
                for n in ast.parse(code).body
                if isinstance(n, ast.FunctionDef) and n.name == obj.group(1)
            )
            shown.append(ast.get_source_segment(code, node) or "")
    return "\n\n".join(shown)


def test_item13_the_webhook_recipe_shows_every_name_it_calls() -> None:
    """0.2.0's recipe called ``event_id`` and ``sign`` without showing them."""
    source = DOCS.parent / "sample_project" / "payments" / "webhooks.py"
    shown = _shown("tasks.rst", source)
    defined, used = _names(ast.parse(shown))
    missing = used - defined - set(dir(builtins))
    assert not missing, f"docs/tasks.rst's webhook recipe uses {missing} without showing them"


def test_the_ninja_page_shows_every_name_its_example_uses() -> None:
    """0.3: the page started at ``from django.conf``, without ``from typing import Any``:
    pasted as shown, the module failed with ``NameError: name 'Any' is not defined``."""
    shown = _shown("ninja.rst", DOCS / "examples" / "ninja_api.py")
    assert shown, "docs/ninja.rst no longer includes docs/examples/ninja_api.py"
    defined, used = _names(ast.parse(shown))
    missing = used - defined - set(dir(builtins))
    assert not missing, f"docs/ninja.rst's example uses {missing} without showing them"


@pytest.mark.django_db
def test_the_webhook_recipe_runs_as_shown(settings: Any) -> None:
    from sample_project.payments.webhooks import provider_webhook, sign

    settings.WEBHOOK_SECRET = "docs-secret"
    body = json.dumps({"id": f"evt_{new_key()}", "type": "ping"}).encode()
    request = RequestFactory().post(
        "/webhooks/provider/",
        body,
        content_type="application/json",
        headers={"X-Signature": sign(body)},
    )
    assert provider_webhook(request).status_code == 200


def _run_settings_snippet(engine: str) -> dict[str, Any]:
    """docs/examples/settings_snippet.py appended to a project on ``engine``: its DATABASES."""
    namespace: dict[str, Any] = {
        "INSTALLED_APPS": ["django.contrib.admin"],
        "DATABASES": {"default": {"ENGINE": engine, "NAME": "mysite"}},
    }
    snippet = DOCS / "examples" / "settings_snippet.py"
    exec(compile(snippet.read_text(), str(snippet), "exec"), namespace)
    return dict(namespace["DATABASES"])


@pytest.mark.parametrize("engine", ["django.db.backends.postgresql", "django.db.backends.mysql"])
def test_the_quick_start_settings_give_no_sqlite_option_to_another_database(engine: str) -> None:
    """0.3: the snippet set SQLite's options on every database: on PostgreSQL
    ``makemigrations`` failed with ``invalid connection option "transaction_mode"``."""
    databases = _run_settings_snippet(engine)
    assert "OPTIONS" not in databases["default"]
    assert check_sqlite_options("default", engine, databases["default"].get("OPTIONS")) == []


def test_the_quick_start_settings_keep_the_sqlite_options_on_sqlite() -> None:
    options = _run_settings_snippet("django.db.backends.sqlite3")["default"]["OPTIONS"]
    assert options == {"transaction_mode": "IMMEDIATE", "timeout": 20}


def test_the_quick_starts_server_databases_pass_e085() -> None:
    """The PostgreSQL and MariaDB ``DATABASES`` the quick start shows, as shown."""
    blocks = [b for b in _code_blocks("quickstart.rst") if "DATABASES = {" in b]
    assert len(blocks) == 2, "docs/quickstart.rst shows a DATABASES per server"
    for block in blocks:
        namespace: dict[str, Any] = {}
        exec(compile(block, "docs/quickstart.rst", "exec"), namespace)
        default = namespace["DATABASES"]["default"]
        assert default["ENGINE"].rpartition(".")[2] in {"postgresql", "mysql"}
        assert check_sqlite_options("default", default["ENGINE"], default.get("OPTIONS")) == []


@pytest.mark.django_db(transaction=True)
def test_the_tasks_pages_settings_store_tasks_for_db_worker(settings: Any) -> None:
    """0.3: docs/django-tasks.rst showed no ``TASKS``: ``enqueue()`` ran tasks inline and
    ``db_worker`` failed with ``Backend 'default' is not a database backend``."""
    (block,) = [b for b in _code_blocks("django-tasks.rst") if "TASKS = " in b]
    namespace: dict[str, Any] = {"INSTALLED_APPS": []}
    exec(compile(block, "docs/django-tasks.rst", "exec"), namespace)
    assert "django_tasks_db" in namespace["INSTALLED_APPS"]
    settings.TASKS = namespace["TASKS"]
    reference = f"docs-{new_key()}"
    result = dj_tasks.immediate_by_key.enqueue(reference)
    assert not Charge.objects.filter(reference=reference).exists()  # stored, not run inline
    assert result.status == "READY"
    call_command("db_worker", "--batch", "--interval", "0.1")  # refused without TASKS
    assert Charge.objects.filter(reference=reference).count() == 1


def _docs_ninja_api() -> Any:
    """docs/examples/ninja_api.py as a module of the sample's payments app (``.models``)."""
    name = "sample_project.payments.docs_ninja_api"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, DOCS / "examples" / "ninja_api.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def test_the_ninja_page_shows_an_async_operation() -> None:
    shown = _shown("ninja.rst", DOCS / "examples" / "ninja_api.py")
    assert "async def create_charge_async" in shown


@pytest.fixture
def docs_ninja_urls(settings: Any) -> None:
    """The page's API at ``/ninja/``, as its URLconf line mounts it."""
    from django.urls import path

    name = "tests.docs_ninja_urls"
    if name not in sys.modules:
        urls = types.ModuleType(name)
        urls.urlpatterns = [path("ninja/", _docs_ninja_api().api.urls)]  # type: ignore[attr-defined]
        sys.modules[name] = urls
    settings.ROOT_URLCONF = name
    settings.PAYMENTS_API_KEYS = {"key-alice"}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", ["/ninja/charges", "/ninja/async/charges"])
@pytest.mark.usefixtures("docs_ninja_urls")
def test_the_ninja_pages_operations_run_once_and_replay_as_shown(path: str) -> None:
    """0.3: the page promised ``async def`` operations and showed none."""
    headers = {"X-API-Key": "key-alice", "Idempotency-Key": new_key()}
    body = json.dumps({"amount": 7})

    def send() -> Any:
        post = async_to_sync(AsyncClient().post) if "/async/" in path else Client().post
        return post(path, body, content_type="application/json", headers=headers)

    first, second = send(), send()
    assert (first.status_code, second.status_code) == (201, 201), first.content
    assert second.content == first.content
    assert second["Idempotent-Replayed"] == "true"
    charge = SampleCharge.objects.get(pk=json.loads(first.content)["id"])
    assert charge.amount == 7
    assert charge.provider_key
