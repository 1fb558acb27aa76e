"""The pages a new user follows, run or checked as written: the clients, conditional
updates, the MCP wiring, installation, the quick start's databases, the demo, the README.

Found by a new user following the docs in a fresh project (issue 44, items 18-25).
"""

from __future__ import annotations

import ast
import json
import re
import sys
import tomllib
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from django.apps import apps
from django.db import connection, models
from django.test import Client
from django.urls import URLResolver, include, path
from django.urls.resolvers import RegexPattern
from mcp_server.views import MCPServerStreamableHttpView
from requests.adapters import HTTPAdapter

from idempotency_django.client import IdempotentAdapter
from sample_project import hint

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def blocks(page: Path, language: str = "python") -> list[tuple[str, str]]:
    """``(caption, body)`` of each ``.. code-block:: <language>`` of an RST page, dedented."""
    found = re.findall(
        rf"\.\. code-block:: {language}\n((?:   :.*\n)*)\n((?:(?: {{4}}.*)?\n)+)",
        page.read_text(),
    )
    return [
        (re.sub(r"(?s).*:caption: ([^\n]*).*", r"\1", options) if options else "", body)
        for options, body in ((o, re.sub(r"(?m)^ {4}", "", b)) for o, b in found)
    ]


def block(page: str, needle: str, language: str = "python") -> str:
    (body,) = [b for _, b in blocks(DOCS / page, language) if needle in b]
    return body


# --- docs/client.rst -----------------------------------------------------------------------


def test_the_requests_recipe_mounts_the_adapter_for_http_and_https(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An ``http://`` call through a session mounted for ``https://`` only went out
    through requests' own adapter: no key, a 400, never retried."""
    sent: list[requests.PreparedRequest] = []

    def send(self: HTTPAdapter, request: requests.PreparedRequest, **kwargs: Any) -> Any:
        sent.append(request)
        response = requests.Response()
        response.status_code, response.request = 201, request
        return response

    monkeypatch.setattr(HTTPAdapter, "send", send)
    namespace: dict[str, Any] = {}
    exec(compile(block("client.rst", "IdempotentAdapter()"), "docs/client.rst", "exec"), namespace)
    session: requests.Session = namespace["session"]
    for url in ("https://ledger.internal/entries/", "http://ledger.internal/entries/"):
        assert isinstance(session.get_adapter(url), IdempotentAdapter), url
    session.post("http://ledger.internal/entries/", json={"amount": 100})
    assert all("Idempotency-Key" in request.headers for request in sent)


# --- docs/conditional.rst ------------------------------------------------------------------


@pytest.fixture
def account_model() -> Iterator[type[models.Model]]:
    """The page's ``Account``, as a model of the test app, with a table for the test."""
    namespace: dict[str, Any] = {"__name__": "tests.testapp.models"}
    exec(compile(block("conditional.rst", "class Account"), "conditional.rst", "exec"), namespace)
    account: type[models.Model] = namespace["Account"]
    try:
        with connection.schema_editor() as editor:
            editor.create_model(account)
        yield account
        with connection.schema_editor() as editor:
            editor.delete_model(account)
    finally:
        del apps.all_models["testapp"]["account"]
        apps.clear_cache()


@pytest.fixture
def conditional_urls(
    account_model: type[models.Model], monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    stand_in = types.ModuleType("payments.models")
    stand_in.Account = account_model  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "payments", types.ModuleType("payments"))
    monkeypatch.setitem(sys.modules, "payments.models", stand_in)
    views: dict[str, Any] = {"__name__": "payments.views"}
    exec(compile(block("conditional.rst", "def update_account"), "views.py", "exec"), views)
    urls = types.ModuleType("docs_conditional_urls")
    urls.urlpatterns = [path("accounts/<int:pk>/", views["account"])]  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, urls.__name__, urls)
    settings.ROOT_URLCONF = urls.__name__


@pytest.mark.django_db(transaction=True)  # the schema editor (SQLite's) runs outside atomic()
@pytest.mark.usefixtures("conditional_urls")
def test_the_if_match_recipe_reads_with_get_and_updates_once_past_csrf(
    account_model: Any,
) -> None:
    """0.4.3's snippet: no ``csrf_exempt`` (curl got 403), a GET was a 500
    (``select_for_update()`` outside a transaction), and its body was ``...``."""
    client = Client(enforce_csrf_checks=True)
    url = f"/accounts/{account_model.objects.create(limit=100).pk}/"

    def patch(key: str, if_match: str | None, body: object) -> Any:
        headers = {"Idempotency-Key": key, **({"If-Match": if_match} if if_match else {})}
        data = json.dumps(body)
        return client.patch(url, data, content_type="application/json", headers=headers)

    read = client.get(url)
    assert (read.status_code, read["ETag"], read.json()["limit"]) == (200, '"1"', 100)
    first = patch("k-1", read["ETag"], {"limit": 500})
    assert (first.status_code, first["ETag"], first.json()["limit"]) == (200, '"2"', 500)
    again = patch("k-1", read["ETag"], {"limit": 500})
    assert (again["Idempotent-Replayed"], again.content) == ("true", first.content)
    assert patch("k-2", read["ETag"], {"limit": 700}).status_code == 412
    assert patch("k-3", None, {"limit": 700}).status_code == 428
    assert patch("k-4", '"2"', {"limit": "lots"}).status_code == 400
    assert client.get("/accounts/999/").status_code == 404
    assert account_model.objects.get().limit == 500


# --- docs/mcp.rst ----------------------------------------------------------------------------


def _quick_start_fields(model: str) -> set[str]:
    tree = ast.parse((DOCS / "examples" / "models.py").read_text())
    (found,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == model]
    names = {t.id for n in found.body if isinstance(n, ast.Assign) for t in n.targets}  # type: ignore[attr-defined]
    return names | {"id", "pk"}


def test_the_mcp_tool_needs_only_the_quick_starts_model_fields() -> None:
    tool = block("mcp.rst", "class PaymentTools")
    created = [
        node
        for node in ast.walk(ast.parse(tool))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "create"
    ]
    assert created
    used = {k.arg for call in created for k in call.keywords}
    assert used <= _quick_start_fields("Charge"), used


def test_the_mcp_page_shows_the_app_the_url_and_the_callers_authentication() -> None:
    captions = {caption: body for caption, body in blocks(DOCS / "mcp.rst") if caption}
    (settings_block,) = [b for c, b in captions.items() if c.startswith("mysite/settings.py")]
    for installed in (["django.contrib.auth"], ["django.contrib.auth", "rest_framework"]):
        namespace: dict[str, Any] = {"INSTALLED_APPS": list(installed)}
        exec(compile(settings_block, "settings.py", "exec"), namespace)
        apps_after = namespace["INSTALLED_APPS"]
        assert len(apps_after) == len(set(apps_after))
        assert {"mcp_server", "rest_framework", "rest_framework.authtoken"} <= set(apps_after)
    for dotted in namespace["DJANGO_MCP_AUTHENTICATION_CLASSES"]:
        module, _, name = dotted.rpartition(".")
        assert hasattr(__import__(module, fromlist=[name]), name), dotted

    (urls_block,) = [b for c, b in captions.items() if c.startswith("mysite/urls.py")]
    urls = types.ModuleType("docs_mcp_urls")
    urls.urlpatterns = []  # type: ignore[attr-defined]
    exec(compile(urls_block, "urls.py", "exec"), {**vars(urls), "path": path, "include": include})
    served = URLResolver(RegexPattern(r"^/"), urls.urlpatterns).resolve("/mcp")
    assert served.func.view_class is MCPServerStreamableHttpView  # type: ignore[attr-defined]
    assert "payments/mcp.py" in (DOCS / "mcp.rst").read_text()


# --- docs/installation.rst, docs/quickstart.rst ----------------------------------------------


def test_the_installation_page_names_only_extras_that_exist() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    table = (DOCS / "installation.rst").read_text().split("Extras\n------")[1]
    named = set(re.findall(r"^``\[([a-z-]+)\]``", table, re.M))
    assert named
    assert named <= set(extras), named - set(extras)
    for line in re.findall(r"pip install '[^']*'", table):
        assert set(re.findall(r"[\[,]([a-z-]+)", line)) <= set(extras), line


def test_the_quick_starts_postgresql_path_creates_its_database_and_user() -> None:
    namespace: dict[str, Any] = {}
    postgres = block("quickstart.rst", "django.db.backends.postgresql")
    exec(compile(postgres, "quickstart.rst", "exec"), namespace)
    database = namespace["DATABASES"]["default"]
    (shell,) = [b for _, b in blocks(DOCS / "quickstart.rst", "sh") if "createdb" in b]
    assert f"createuser --createdb --pwprompt {database['USER']}" in shell
    assert f"createdb --owner {database['USER']} {database['NAME']}" in shell


# --- docs/demo.rst, README.rst ---------------------------------------------------------------

NUMBERS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}


def test_the_demo_page_counts_the_curl_lines_make_run_prints() -> None:
    printed = len(re.findall(r"^  curl ", hint.HINT, re.M))
    assert f"followed by {NUMBERS[printed]} ``curl`` lines" in (DOCS / "demo.rst").read_text()


README = (ROOT / "README.rst").read_text()


def test_the_readme_is_a_door_of_at_most_150_lines() -> None:
    assert len(README.splitlines()) <= 150


@pytest.mark.parametrize("page", ["client", "conditional", "verify", "mcp", "forms"])
def test_the_readme_links_the_page(page: str) -> None:
    assert f"/en/latest/{page}.html" in README


@pytest.mark.parametrize(
    "name",
    [
        "idempotency_key_field",
        "IdempotentFormMixin",
        "IdempotentAdminMixin",
        "IdempotencyMiddleware",
    ],
)
def test_the_readme_names_the_forms_the_admin_and_the_switch(name: str) -> None:
    assert name in README


def test_the_readme_says_a_browser_gets_a_page_not_problem_json() -> None:
    """0.5's README said every refusal is application/problem+json."""
    assert "all ``application/problem+json``" not in README
    assert "``text/html``) a page with the same status" in README


def test_the_readme_keeps_its_commands() -> None:
    assert (
        "    make run     # serves the sample payments project on http://127.0.0.1:8000/\n"
        "    make test    # provisions the services, then the suite on every database\n"
    ) in README
    assert (
        "    idempotency-conformance https://staging.example.com/charges/ \\\n"
        "        --header 'Authorization: Token …'\n"
    ) in README
