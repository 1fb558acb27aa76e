"""docs/graphql.rst's examples run as written, on the quick start's model (issue 44, item 22).

The page showed ``from sample_project.payments.models import Charge`` and a mutation
writing ``currency`` and ``description``, fields the quick start's ``Charge`` lacks. Its
examples are now ``docs/examples/graphql_api.py`` (Strawberry) and ``graphene_api.py``:
modules of the quick start's ``payments`` app, run here as modules of the sample's
(whose ``Charge`` has every field of the quick start's), and checked to use no field
the quick start's model lacks.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient, Client

from sample_project.payments.models import Charge
from tests.helpers import new_key

DOCS = Path(__file__).resolve().parent.parent / "docs"
EXAMPLES = {"strawberry": DOCS / "examples" / "graphql_api.py"}
try:  # Graphene needs graphql-core < 3.3 (see tests/testapp/urls.py)
    import idempotency_django.graphene  # noqa: F401
except ImportError:
    pass
else:
    EXAMPLES["graphene"] = DOCS / "examples" / "graphene_api.py"


def _quick_start_fields() -> set[str]:
    """The fields of docs/examples/models.py's ``Charge`` (the quick start's model)."""
    tree = ast.parse((DOCS / "examples" / "models.py").read_text())
    (charge,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Charge"]
    return {
        target.id
        for statement in charge.body
        if isinstance(statement, ast.Assign)
        for target in statement.targets
        if isinstance(target, ast.Name)
    }


def _example(stack: str) -> Any:
    """The example as a module of the sample's payments app (its ``.models`` import)."""
    name = f"sample_project.payments.docs_{stack}_api"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, EXAMPLES[stack])
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture
def docs_urls(settings: Any) -> None:
    """The page's URLconf line, ``path("graphql/", include(...))``, for each example."""
    from django.urls import include, path

    name = "tests.docs_graphql_urls"
    if name not in sys.modules:
        urls = types.ModuleType(name)
        urls.urlpatterns = [  # type: ignore[attr-defined]
            path(f"{stack}/", include(_example(stack))) for stack in EXAMPLES
        ]
        sys.modules[name] = urls
    settings.ROOT_URLCONF = name


def test_the_page_shows_both_examples_and_nothing_of_the_sample_project() -> None:
    page = (DOCS / "graphql.rst").read_text()
    assert ".. literalinclude:: examples/graphql_api.py" in page
    assert ".. literalinclude:: examples/graphene_api.py" in page
    assert "sample_project" not in page
    assert "from payments.models" not in page  # the examples import their app's .models


@pytest.mark.parametrize("path", [DOCS / "examples" / "graphql_api.py", EXAMPLES.get("graphene")])
def test_the_examples_use_only_the_quick_starts_fields(path: Path | None) -> None:
    """Every keyword of ``Charge.objects.create(...)`` is a field of the quick start's model."""
    if path is None:
        pytest.skip("Graphene does not import beside this graphql-core")
    fields = _quick_start_fields()
    tree = ast.parse(path.read_text())
    creates = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "Charge.objects.create"
    ]
    assert creates, f"{path.name} writes no Charge"
    used = {keyword.arg for call in creates for keyword in call.keywords}
    assert used <= fields, f"{path.name} writes {used - fields}, not in the quick start's model"


def _curl_query() -> str:
    """The query of the page's curl line."""
    page = (DOCS / "graphql.rst").read_text()
    (body,) = re.findall(r"-d '(\{\"query\".*\})'", page)
    query: str = json.loads(body)["query"]
    return query


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("docs_urls")
@pytest.mark.parametrize("stack", list(EXAMPLES))
def test_the_pages_curl_line_runs_once_and_replays_byte_for_byte(stack: str) -> None:
    headers = {"Idempotency-Key": new_key()}
    body = json.dumps({"query": _curl_query()})

    def send() -> Any:
        return Client().post(f"/{stack}/", body, content_type="application/json", headers=headers)

    first, retry = send(), send()
    assert first.status_code == 200, first.content
    data = json.loads(first.content)
    assert "errors" not in data, data
    assert retry.content == first.content
    charge = Charge.objects.get()
    assert charge.amount == 500
    assert charge.provider_key  # derived from the key: the same on every retry


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("docs_urls")
@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/strawberry/", "checkout"),
        ("/strawberry/async/", "checkoutAsync"),
        pytest.param(
            "/graphene/",
            "checkout",
            marks=pytest.mark.skipif("graphene" not in EXAMPLES, reason="no Graphene here"),
        ),
    ],
)
def test_the_examples_user_error_is_stored_and_replayed(path: str, field: str) -> None:
    query = f"mutation {{ {field}(amount: 0) {{ charge {{ id }} errors {{ field message }} }} }}"
    headers = {"Idempotency-Key": new_key()}
    body = json.dumps({"query": query})

    def send() -> Any:
        if "/async/" in path:
            post = async_to_sync(AsyncClient().post)
            return post(path, body, content_type="application/json", headers=headers)
        return Client().post(path, body, content_type="application/json", headers=headers)

    first, retry = send(), send()
    errors = json.loads(first.content)["data"][field]["errors"]
    assert errors == [{"field": "amount", "message": "must be positive"}]
    assert retry.content == first.content
    assert not Charge.objects.exists()
