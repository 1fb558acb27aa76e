"""The shared-key check against the stack's own parser: a differential contract (issue 53).

Before the first field of a request runs, the library reads what the request holds (the
batch as the stack's view parses it, each operation as graphql-core chooses it) and plans
its protected fields, each with the key it will take. Here every encoding each stack accepts
(a JSON body, a batch's list, the query in the URL of a GET or of a POST, ``application/
graphql``, a form, the GraphQL multipart request spec) carries documents of every shape
(aliases, nested fields, fragments, operation names ``"null"``, ``null``, missing, absent
among many, unknown), and for each request what the library planned is compared with what the
stack executed, counted in effects (one charge per resolver run) and claimed keys:

- the check refused the request (two planned fields would take one key): nothing ran;
- else every planned field that takes a key ran once, under its own key, and nothing else did;
- whatever happened: no two executed protected fields ever shared one key.

A request the stack answers as a whole with an HTTP error (Strawberry stops a batch at an
item naming an unknown operation), or one with a field under ``@skip`` (not evaluated by the
check: it counts), runs at most what was planned, and never two fields under one key.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from unittest import mock
from urllib.parse import urlencode

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from graphql import value_from_ast_untyped

from idempotency_django._adapters import graphql_fields
from idempotency_django.models import IdempotencyEntry
from tests.helpers import new_key
from tests.testapp.models import Charge

pytestmark = [pytest.mark.faces, pytest.mark.django_db(transaction=True)]

ABSENT = object()  # an item without the member (``None`` is JSON's null)
FILES = "files"  # an item's uploads: where each goes in the item, and its content


@dataclass
class Case:
    """Fresh references and keys for one request, so its effects and claims are its own."""

    prefix: str = field(default_factory=new_key)
    keys: list[str] = field(default_factory=list)
    count: itertools.count[int] = field(default_factory=itertools.count)

    def reference(self) -> str:
        return f"{self.prefix}-{next(self.count)}"

    def key(self) -> str:
        self.keys.append(new_key())
        return self.keys[-1]


Item = dict[str, Any]
CHARGE = 'charge(reference: "{r}"{k}) {{ id }}'
PAY = 'pay(reference: "{r}"{k}) {{ id }}'


def _key(case: Case, keyed: bool) -> str:
    return f', idempotencyKey: "{case.key()}"' if keyed else ""


def _charge(case: Case, keyed: bool = False) -> str:
    return CHARGE.format(r=case.reference(), k=_key(case, keyed))


def _pay(case: Case, keyed: bool = False) -> str:
    return PAY.format(r=case.reference(), k=_key(case, keyed))


def _named(name: object) -> Callable[[Case], Item]:
    """One mutation named ``A`` and a query named ``B``, sent with ``operationName``."""

    def item(case: Case) -> Item:
        query = f"mutation A {{ {_charge(case)} }} query B {{ ping }}"
        return {"query": query, "operationName": name}

    return item


def _single(name: object) -> Callable[[Case], Item]:
    """One mutation named ``A``, sent with ``operationName``."""

    def item(case: Case) -> Item:
        return {"query": f"mutation A {{ {_charge(case)} }}", "operationName": name}

    return item


def _by_variables(case: Case) -> Item:
    query = "mutation($r: String!, $k: String) { charge(reference: $r, idempotencyKey: $k) { id } }"
    return {"query": query, "variables": {"r": case.reference(), "k": case.key()}}


def _uncoercible(case: Case) -> Item:
    query = "mutation($r: String!) { charge(reference: $r) { id } }"
    return {"query": query, "variables": {"r": 5}}


def _upload(case: Case) -> Item:
    query = 'mutation($f: Upload!) {{ attach(reference: "{r}", file: $f) {{ id }} }}'
    content = case.prefix.encode()
    return {
        "query": query.format(r=case.reference()),
        "variables": {"f": None},
        FILES: {"variables.f": content},
    }


ITEMS: dict[str, Callable[[Case], Item]] = {
    "header": lambda case: {"query": f"mutation {{ {_charge(case)} }}"},
    "argument": lambda case: {"query": f"mutation {{ {_charge(case, keyed=True)} }}"},
    "variables": _by_variables,
    "two-aliases": lambda case: {"query": f"mutation {{ a: {_charge(case)} b: {_charge(case)} }}"},
    "two-aliases-own-keys": lambda case: {
        "query": f"mutation {{ a: {_charge(case, True)} b: {_charge(case, True)} }}"
    },
    "merged": lambda case: {  # one response name, one execution: graphql-core merges them
        "query": "mutation {{ {c} {c} }}".format(c=_charge(case))
    },
    "nested": lambda case: {"query": f"mutation {{ account(id: 1) {{ {_pay(case)} }} }}"},
    "two-parents": lambda case: {
        "query": f"mutation {{ a: account(id: 1) {{ {_pay(case)} }} "
        f"b: account(id: 2) {{ {_pay(case)} }} }}"
    },
    "two-parents-own-keys": lambda case: {
        "query": f"mutation {{ a: account(id: 1) {{ {_pay(case, True)} }} "
        f"b: account(id: 2) {{ {_pay(case, True)} }} }}"
    },
    "under-a-list": lambda case: {
        "query": f"mutation {{ accounts(ids: [1, 2]) {{ {_pay(case, True)} }} }}"
    },
    "fragment": lambda case: {
        "query": f"mutation {{ ...F }} fragment F on Mutation {{ {_charge(case)} }}"
    },
    "inline-fragment": lambda case: {
        "query": f"mutation {{ ... on Mutation {{ {_charge(case)} }} }}"
    },
    "nested-fragment": lambda case: {
        "query": "mutation { account(id: 3) { ...P } } "
        f"fragment P on AccountOps {{ {_pay(case)} }}"
    },
    "many-named-A": _named("A"),
    "many-named-B": _named("B"),
    "many-named-null": _named(None),
    "many-named-'null'": _named("null"),
    "many-unnamed": _named(ABSENT),
    "many-named-unknown": _named("C"),
    "one-named-A": _single("A"),
    "one-named-null": _single(None),
    "one-named-'null'": _single("null"),
    "one-unnamed": _single(ABSENT),
    "one-named-unknown": _single("C"),
    "one-named-empty": _single(""),
    "query": lambda case: {"query": "query { ping }"},
    "invalid": lambda case: {
        "query": f'mutation {{ charge(reference: "{case.reference()}") {{ nope }} }}'
    },
    "unparsable": lambda case: {"query": "mutation {"},
    "uncoercible": _uncoercible,
    "no-query": lambda case: {"variables": {}},
    "variables-text": lambda case: {  # graphene-django: "Variables are invalid JSON."
        "query": "mutation($r: String!) { charge(reference: $r) { id } }",
        "variables": "r",
    },
    "upload": _upload,  # multipart only
    "included": lambda case: {
        "query": "mutation {{ {c} }}".format(
            c=_charge(case).replace(" {", " @include(if: true) {", 1)
        )
    },
    "skipped": lambda case: {
        "query": "mutation {{ {c} }}".format(c=_charge(case).replace(" {", " @skip(if: true) {", 1))
    },
}
# Items the check plans more of than runs (docs/graphql.rst, "Limits": ``@skip`` and ``@include``
# are not evaluated, a field either would be counts): it may refuse, never let a key be shared.
OVERCOUNTED = {"skipped"}
# Items a Strawberry batch stops at, answering the whole request 400 (the items before ran):
# an async view's batch runs its items together, so what ran of it is left to chance.
STOPS_STRAWBERRY = {
    "many-named-'null'",
    "many-named-unknown",
    "one-named-'null'",
    "one-named-unknown",
    "one-named-empty",
    "no-query",
    "variables-text",
}


# --- encodings -------------------------------------------------------------------------------


def _members(item: Item) -> dict[str, Any]:
    return {name: value for name, value in item.items() if value is not ABSENT and name != FILES}


def _url_params(item: Item) -> dict[str, str]:
    """An item in a URL's query string (variables as JSON; a null name cannot be written)."""
    params = {}
    for name, value in _members(item).items():
        if value is None:
            continue
        params[name] = json.dumps(value) if name == "variables" else str(value)
    return params


@dataclass(frozen=True)
class Sending:
    """A request as the client sends it."""

    method: str
    url: str
    body: Any = None
    content_type: str | None = None


def json_body(url: str, items: list[Item], batch: bool) -> Sending:
    body = [_members(item) for item in items] if batch else _members(items[0])
    return Sending("post", url, json.dumps(body), "application/json")


def graphql_body(url: str, items: list[Item], batch: bool) -> Sending:
    params = _url_params(items[0])
    query = params.pop("query", "")
    return Sending("post", f"{url}?{urlencode(params)}", query, "application/graphql")


def form_body(url: str, items: list[Item], batch: bool) -> Sending:
    return Sending(
        "post", url, urlencode(_url_params(items[0])), "application/x-www-form-urlencoded"
    )


def get_query(url: str, items: list[Item], batch: bool) -> Sending:
    return Sending("get", f"{url}?{urlencode(_url_params(items[0]))}")


def post_query(url: str, items: list[Item], batch: bool) -> Sending:
    """The first item in the URL, the others (or a ping) in the body."""
    decoys = [_members(item) for item in items[1:]] or [{"query": "{ ping }"}]
    body = decoys if batch else decoys[0]
    return Sending(
        "post", f"{url}?{urlencode(_url_params(items[0]))}", json.dumps(body), "application/json"
    )


def multipart(url: str, items: list[Item], batch: bool) -> Sending:
    """The GraphQL multipart request spec: ``operations``, ``map``, then the files."""
    operations: Any = [_members(item) for item in items] if batch else _members(items[0])
    form: dict[str, Any] = {"operations": json.dumps(operations)}
    places: dict[str, list[str]] = {}
    for index, item in enumerate(items if batch else items[:1]):
        for place, content in item.get(FILES, {}).items():
            name = str(len(places))
            places[name] = [f"{index}.{place}" if batch else place]
            form[name] = SimpleUploadedFile(f"{name}.txt", content, content_type="text/plain")
    form["map"] = json.dumps(places)
    return Sending("post", url, form)


Encode = Callable[[str, list[Item], bool], Sending]


@dataclass(frozen=True)
class View:
    """A routed view and the encodings its stack accepts on it."""

    name: str
    url: str
    batch: bool
    encodings: dict[str, Encode]
    strawberry_async: bool = False


VIEWS = [
    View(
        "graphene",
        "/graphene/",
        False,
        {
            "json": json_body,
            "graphql": graphql_body,
            "form": form_body,
            "get": get_query,
            "post-query": post_query,
        },
    ),
    View("graphene-uploads", "/graphene/uploads/", False, {"multipart": multipart}),
    View(
        "graphene-batch",
        "/graphene/batch/",
        True,
        {"json": json_body, "post-query": post_query, "get": get_query},
    ),
    View("graphene-batch-uploads", "/graphene/batch/uploads/", True, {"multipart": multipart}),
    View(
        "strawberry",
        "/graphql/",
        False,
        {
            "json": json_body,
            "get": get_query,
            "post-query": post_query,
            "graphql": graphql_body,
            "form": form_body,
        },
    ),
    View("strawberry-async", "/graphql/async/", False, {"json": json_body, "get": get_query}, True),
    View("strawberry-uploads", "/graphql/uploads/", False, {"multipart": multipart}),
    View(
        "strawberry-batch", "/graphql/batch/", True, {"json": json_body, "post-query": post_query}
    ),
    View("strawberry-batch-uploads", "/graphql/batch/uploads/", True, {"multipart": multipart}),
    View("strawberry-async-batch", "/graphql/async/batch/", True, {"json": json_body}, True),
    View(
        "strawberry-async-batch-uploads",
        "/graphql/async/batch/uploads/",
        True,
        {"multipart": multipart},
        True,
    ),
]


# --- the cases -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    view: View
    encoding: str
    items: tuple[str, ...]
    header: bool

    @property
    def id(self) -> str:
        header = "header" if self.header else "no-header"
        return f"{self.view.name}:{self.encoding}:{'+'.join(self.items)}:{header}"


def _fits(view: View, encoding: str, items: tuple[str, ...]) -> bool:
    if "upload" in items and encoding != "multipart":
        return False  # a file travels in a multipart request only (which carries any item)
    if view.strawberry_async and view.batch:
        return not STOPS_STRAWBERRY.intersection(items)
    return True


def _requests(view: View, encoding: str) -> Iterator[Request]:
    """Every item alone on a single view, with the header and without; on a batch view,
    every item beside the header-keyed checkout (before and after it) and beside itself,
    with the header, and beside itself without."""
    shapes: list[tuple[str, ...]]
    if view.batch:
        shapes = [
            shape for name in ITEMS for shape in ((name, "header"), ("header", name), (name, name))
        ]
    else:
        shapes = [(name,) for name in ITEMS]
    for shape in dict.fromkeys(shapes):
        if not _fits(view, encoding, shape):
            continue
        yield Request(view, encoding, shape, header=True)
        if shape[0] == shape[-1]:  # without the header: each item as it is
            yield Request(view, encoding, shape, header=False)


def _graphene_imports() -> bool:
    try:  # Graphene needs graphql-core < 3.3 (see tests/testapp/urls.py)
        import tests.testapp.graphene_api  # noqa: F401
    except ImportError:  # pragma: no cover
        return False
    return True


def _params() -> list[Any]:
    """One test per view and encoding (its requests in a loop: a transactional test's flush
    costs more than a request)."""
    skip = pytest.mark.skip(reason="Graphene does not import beside this graphql-core")
    graphene = _graphene_imports()
    return [
        pytest.param(
            view,
            encoding,
            id=f"{view.name}:{encoding}",
            marks=() if graphene or not view.name.startswith("graphene") else skip,
        )
        for view in VIEWS
        for encoding in view.encodings
    ]


# --- what the library planned, what the stack ran ----------------------------------------------


@dataclass
class Observed:
    plans: list[list[graphql_fields.Planned]] = field(default_factory=list)
    status: int = 0
    answer: Any = None


def _send(request: Request, case: Case) -> Observed:
    items = [ITEMS[name](case) for name in request.items]
    sending = request.view.encodings[request.encoding](request.view.url, items, request.view.batch)
    headers = {"Idempotency-Key": case.key()} if request.header else {}
    observed = Observed()
    real = graphql_fields.plan

    def spy(*args: Any) -> list[graphql_fields.Planned]:
        planned = real(*args)
        observed.plans.append(planned)
        return planned

    client = Client()
    with mock.patch.object(graphql_fields, "plan", spy):
        if sending.method == "get":
            response = client.get(sending.url, headers=headers)
        elif sending.content_type is None:
            response = client.post(sending.url, sending.body, headers=headers)
        else:
            response = client.post(
                sending.url, sending.body, content_type=sending.content_type, headers=headers
            )
    observed.status = response.status_code
    try:
        observed.answer = json.loads(response.content)
    except ValueError:
        observed.answer = None
    return observed


def _reference(planned: graphql_fields.Planned) -> str:
    for argument in planned.node.arguments:
        if argument.name.value == "reference":
            return str(value_from_ast_untyped(argument.value, dict(planned.variables)))
    raise AssertionError("every protected field of these schemas takes a reference")


def _key_value(planned: graphql_fields.Planned, header: str | None) -> str:
    assert planned.key is not None
    source, value = planned.key
    if source == "header":
        assert header is not None
        return header
    return value


@pytest.mark.parametrize(("view", "encoding"), _params())
def test_the_check_plans_what_the_stack_runs(view: View, encoding: str) -> None:
    requests = list(_requests(view, encoding))
    differences = [f"{request.id}: {found}" for request in requests if (found := _differs(request))]
    assert not differences, "\n".join(differences)
    assert requests


def _differs(request: Request) -> str | None:
    """How what ran differs from what the check planned, or ``None``."""
    case = Case()
    observed = _send(request, case)
    header = case.keys[-1] if request.header else None
    refused = any(graphql_fields._shared(planned) is not None for planned in observed.plans)
    planned = [p for plan in observed.plans for p in plan if p.key is not None]
    predicted = Counter() if refused else Counter(_reference(p) for p in planned)
    predicted_keys = set() if refused else {_key_value(p, header) for p in planned}
    charges = Charge.objects.filter(reference__startswith=case.prefix)
    ran = Counter(
        reference.split(":")[0] for reference in charges.values_list("reference", flat=True)
    )
    claimed = set(IdempotencyEntry.objects.filter(key__in=case.keys).values_list("key", flat=True))
    seen = f"ran {dict(ran)}, claimed {claimed}, answered {observed.status} {observed.answer}"
    if sum(ran.values()) != len(claimed):  # each run claims a key of its own
        return f"two executed fields shared a key: {seen}"
    stopped = request.view.batch and not isinstance(observed.answer, list)
    if stopped or OVERCOUNTED.intersection(request.items):
        # The stack stopped the batch (an HTTP error for all of it), or the check planned more
        # than runs: at most what was planned ran.
        beyond = ran - Counter(_reference(p) for p in planned)
        return f"ran what was not planned: {seen}" if beyond else None
    if ran != predicted or claimed != predicted_keys:
        return f"planned {dict(predicted)} under {predicted_keys}: {seen}"
    return None
