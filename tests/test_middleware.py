"""IdempotencyMiddleware: every unsafe request that carries a key, protected as @idempotent
would; views that protect themselves, opt out, or authenticate inside left alone."""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import urlencode

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient, Client, RequestFactory
from django.utils.decorators import method_decorator
from django.views import View
from ninja import NinjaAPI
from ninja.streaming import JSONL
from rest_framework.decorators import api_view
from rest_framework.response import Response
from rest_framework.views import APIView

from idempotency_django import idempotency_exempt, idempotent
from idempotency_django.forms import FIELD_NAME
from idempotency_django.middleware import protects
from idempotency_django.models import IdempotencyEntry
from idempotency_django.views import IdempotentFormMixin
from tests.testapp.models import Charge

JSON = "application/json"
pytestmark = [
    pytest.mark.faces,
    pytest.mark.django_db,
    pytest.mark.urls("tests.testapp.form_views"),
]

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "idempotency_django.middleware.IdempotencyMiddleware",
]


@pytest.fixture(autouse=True)
def with_middleware(settings: Any) -> None:
    settings.MIDDLEWARE = MIDDLEWARE


def browser_post(client: Client, path: str, data: dict[str, str], **extra: Any) -> Any:
    """A form post as a browser sends it (urlencoded: the test client's default is multipart)."""
    return client.post(path, urlencode(data), "application/x-www-form-urlencoded", **extra)


def _form(key: str | None, **fields: str) -> dict[str, str]:
    data = {"reference": "order-1", **fields}
    return data if key is None else {**data, FIELD_NAME: key}


def test_the_middleware_protects_a_plain_view_posted_with_a_form_key(client: Client) -> None:
    key = str(uuid.uuid4())
    first = browser_post(client, "/forms/plain/", _form(key))
    again = browser_post(client, "/forms/plain/", _form(key))
    assert first.status_code == again.status_code == 302
    assert again["Location"] == first["Location"]
    assert again["Idempotent-Replayed"] == "true"
    assert Charge.objects.count() == 1


def test_the_middleware_protects_a_plain_view_posted_with_the_header(client: Client) -> None:
    key = str(uuid.uuid4())
    for _ in range(2):
        client.post("/forms/plain/", _form(None), headers={"Idempotency-Key": key})
    assert Charge.objects.count() == 1


def test_the_middleware_lets_a_request_without_a_key_through(client: Client) -> None:
    client.post("/forms/plain/", _form(None))
    client.post("/forms/plain/", _form(None))
    assert Charge.objects.count() == 2


def test_an_exempt_view_is_never_protected_by_the_middleware(client: Client) -> None:
    key = str(uuid.uuid4())
    browser_post(client, "/forms/exempt/", _form(key))
    browser_post(client, "/forms/exempt/", _form(key))
    assert Charge.objects.count() == 2


def test_idempotency_exempt_is_exported_from_the_package() -> None:
    import idempotency_django

    assert idempotency_django.idempotency_exempt is idempotency_exempt


def test_a_view_that_protects_itself_is_protected_once_not_twice(client: Client) -> None:
    key = str(uuid.uuid4())
    first = browser_post(client, "/forms/create/", _form(key, amount="1"))
    again = browser_post(client, "/forms/create/", _form(key, amount="1"))
    assert again["Idempotent-Replayed"] == "true"
    assert first.status_code == 302
    assert Charge.objects.count() == 1


@pytest.mark.parametrize("path", ["/forms/post-decorated/", "/forms/delegating/"])
def test_a_view_protecting_itself_below_the_url_is_claimed_once_under_the_middleware(
    client: Client, path: str
) -> None:
    # A handler under @method_decorator(idempotent), or an @idempotent view another one
    # calls: one claim, one effect, and the repeat replays (not a 409 against itself).
    key = str(uuid.uuid4())
    first = browser_post(client, path, _form(key))
    again = browser_post(client, path, _form(key))
    assert first.status_code == again.status_code == 302
    assert again["Idempotent-Replayed"] == "true"
    assert Charge.objects.count() == IdempotencyEntry.objects.count() == 1


def test_a_strawberry_mutation_is_claimed_once_by_its_field_under_the_middleware(
    client: Client,
) -> None:
    import json

    key = str(uuid.uuid4())
    query = 'mutation { charge(reference: "sw-1", amount: 5) { reference amount } }'
    answers = [
        client.post(
            "/graphql/", json.dumps({"query": query}), JSON, headers={"Idempotency-Key": key}
        )
        for _ in range(2)
    ]
    assert [a.status_code for a in answers] == [200, 200]
    assert answers[0].json() == answers[1].json()
    assert answers[0].json()["data"]["charge"]["reference"] == "sw-1"
    assert Charge.objects.count() == IdempotencyEntry.objects.count() == 1


def test_a_keyed_post_without_its_csrf_token_is_refused_though_csrf_comes_after(
    settings: Any,
) -> None:
    # E091 reports the order; the switch runs the CSRF check itself before any claim.
    csrf = "django.middleware.csrf.CsrfViewMiddleware"
    settings.MIDDLEWARE = [*MIDDLEWARE, csrf]
    client = Client(enforce_csrf_checks=True)
    refused = browser_post(client, "/forms/plain/", _form(str(uuid.uuid4())))
    assert refused.status_code == 403
    assert Charge.objects.count() == IdempotencyEntry.objects.count() == 0


def test_a_csrf_exempt_view_is_protected_without_a_token(settings: Any) -> None:
    settings.MIDDLEWARE = [*MIDDLEWARE, "django.middleware.csrf.CsrfViewMiddleware"]
    client = Client(enforce_csrf_checks=True)
    key = str(uuid.uuid4())
    first = browser_post(client, "/forms/csrf-exempt/", _form(key))
    again = browser_post(client, "/forms/csrf-exempt/", _form(key))
    assert first.status_code == again.status_code == 302
    assert again["Idempotent-Replayed"] == "true"
    assert Charge.objects.count() == 1


def test_an_upload_view_setting_its_upload_handlers_works_under_the_middleware(
    client: Client,
) -> None:
    from django.core.files.uploadedfile import SimpleUploadedFile

    # The switch reads no multipart body: the view's handlers must see it first.
    answer = client.post("/forms/custom-upload/", {"f": SimpleUploadedFile("a.txt", b"hello")})
    assert answer.status_code == 201
    assert answer.content == b"1"


def test_a_multipart_form_is_protected_by_the_switch_through_its_header_only(
    client: Client,
) -> None:
    from django.test.client import MULTIPART_CONTENT

    field_key, header_key = str(uuid.uuid4()), str(uuid.uuid4())
    for _ in range(2):
        client.post("/forms/plain/", _form(field_key), content_type=MULTIPART_CONTENT)
    assert Charge.objects.count() == 2  # the field of a multipart body is not read
    for _ in range(2):
        client.post(
            "/forms/plain/",
            _form(None),
            content_type=MULTIPART_CONTENT,
            headers={"Idempotency-Key": header_key},
        )
    assert Charge.objects.count() == 3


@pytest.mark.parametrize("stack", ["strawberry", "graphene"])
def test_a_graphql_view_executing_with_the_adapters_context_is_left_to_its_fields(
    stack: str,
) -> None:
    module = pytest.importorskip(f"tests.testapp.{stack}_api")
    protected, *_, misconfigured = (pattern.callback for pattern in module.urlpatterns)
    assert not protects(_keyed("/graphql/"), protected)
    assert protects(_keyed("/graphql/"), misconfigured)  # no context: the switch's to protect


def _keyed(path: str) -> Any:
    return RequestFactory().post(path, {}, content_type=JSON, headers={"Idempotency-Key": "k"})


def _view(request: Any) -> Any:
    raise AssertionError("not called")


class _DrfView(APIView):
    pass


@api_view(["POST"])
def _drf_function(request: Any) -> Response:
    return Response()


@api_view(["POST"])
@idempotent
def _drf_function_protecting_itself(request: Any) -> Response:
    return Response()


class _FormView(IdempotentFormMixin, View):
    pass


class _PostDecorated(View):
    @method_decorator(idempotent)
    def post(self, request: Any) -> Any:
        raise AssertionError("not called")


def _ninja_views(api: NinjaAPI) -> dict[str, Any]:
    return {str(pattern.pattern): pattern.callback for pattern in api.urls[0]}


def test_the_middleware_protects_a_drf_view_through_its_class_after_authentication() -> None:
    assert protects(_keyed("/x"), _view)
    assert protects(_keyed("/x"), _DrfView.as_view())
    assert protects(_keyed("/x"), _drf_function)
    assert not protects(_keyed("/x"), _drf_function_protecting_itself)
    assert not protects(RequestFactory().post("/x"), _DrfView.as_view())


def test_the_middleware_reaches_a_ninja_operation_of_the_installed_ninja() -> None:
    # Ninja's path view hides its operations in a closure: if a Ninja release moves them,
    # this fails (the middleware would otherwise leave Ninja unprotected, silently).
    api = NinjaAPI(urls_namespace="middleware-test")

    @api.post("/x")
    def operation(request: Any) -> int:
        return 1

    @api.post("/streamed", response=JSONL[int])
    def streamed(request: Any) -> Any:
        yield 1

    views = _ninja_views(api)
    assert protects(_keyed("/x"), views["x"])
    assert not protects(RequestFactory().post("/x"), views["x"])
    assert not protects(_keyed("/streamed"), views["streamed"])  # an answer never stored


def test_the_middleware_leaves_decorated_and_mixin_views_to_protect_themselves() -> None:
    assert not protects(_keyed("/x"), idempotent(_view))
    assert not protects(_keyed("/x"), _FormView.as_view())
    assert not protects(_keyed("/x"), _PostDecorated.as_view())


def test_a_drf_view_with_token_authentication_is_answered_by_its_own_mixin(
    client: Client, django_user_model: Any
) -> None:
    # The DRF test views carry IdempotentMixin: the key space is the token's user.
    from rest_framework.authtoken.models import Token

    user = django_user_model.objects.create_user("drf-user")
    token = Token.objects.create(user=user)
    key = str(uuid.uuid4())
    headers = {"Idempotency-Key": key, "Authorization": f"Token {token.key}"}
    first = client.post(
        "/api/apiview/", {"amount": 1}, content_type="application/json", headers=headers
    )
    again = client.post(
        "/api/apiview/", {"amount": 1}, content_type="application/json", headers=headers
    )
    assert again.get("Idempotent-Replayed") == "true", (first.status_code, again.status_code)


def test_the_middleware_passes_safe_methods_through(client: Client) -> None:
    assert client.get("/forms/plain/").status_code == 200
    assert "IdempotencyMiddleware" in MIDDLEWARE[-1]


def test_two_users_sending_one_key_through_the_middleware_never_share_an_answer(
    django_user_model: Any,
) -> None:
    key = str(uuid.uuid4())
    answers = []
    for name in ("ann", "bob"):
        client = Client()
        client.force_login(django_user_model.objects.create_user(name))
        answers.append(browser_post(client, "/forms/plain/", _form(key, reference=name)))
    assert all("Idempotent-Replayed" not in answer for answer in answers)
    assert Charge.objects.count() == 2


def test_an_empty_key_header_is_refused_by_the_middleware_as_idempotent_would(
    client: Client,
) -> None:
    refused = client.post("/forms/plain/", _form(None), headers={"Idempotency-Key": ""})
    assert refused.status_code == 400
    assert Charge.objects.count() == 0


# --- views protected by nothing but the middleware (tests/testapp/switch_views.py) ----------------

SWITCH = pytest.mark.urls("tests.testapp.switch_views")
DRF_PATHS = ["/switch/drf/", "/switch/viewset/", "/switch/drf-function/", "/switch/adrf/"]
NINJA_PATHS = ["/switch/ninja/charges", "/switch/ninja/async/charges"]


@pytest.fixture
def tokens(django_user_model: Any) -> tuple[str, str]:
    from rest_framework.authtoken.models import Token

    ann, bob = (django_user_model.objects.create_user(name) for name in ("sw-ann", "sw-bob"))
    return Token.objects.create(user=ann).key, Token.objects.create(user=bob).key


def _post(
    client: Client, path: str, key: str, headers: dict[str, str] | None = None, amount: int = 1
) -> Any:
    return client.post(
        path,
        {"amount": amount},
        content_type=JSON,
        headers={"Idempotency-Key": key, **(headers or {})},
    )


def _token(token: str) -> dict[str, str]:
    return {"Authorization": f"Token {token}"}


def _api_key(name: str) -> dict[str, str]:
    return {"X-API-Key": f"switch-{name}"}


@SWITCH
@pytest.mark.parametrize("path", DRF_PATHS)
def test_the_middleware_runs_a_drf_view_with_token_authentication_once_per_key(
    client: Client, tokens: tuple[str, str], path: str
) -> None:
    key = str(uuid.uuid4())
    first = _post(client, path, key, _token(tokens[0]))
    again = _post(client, path, key, _token(tokens[0]))
    other = _post(client, path, key, _token(tokens[0]), amount=2)
    assert first.status_code == 201, first.content
    assert again["Idempotent-Replayed"] == "true"
    assert again.content == first.content
    assert other.status_code == 422
    assert Charge.objects.count() == 1


@SWITCH
@pytest.mark.parametrize("path", DRF_PATHS)
def test_the_middleware_stores_nothing_for_an_unauthenticated_drf_request(
    client: Client, tokens: tuple[str, str], path: str
) -> None:
    key = str(uuid.uuid4())
    refused = [_post(client, path, key), _post(client, path, key, _token("not-a-token"))]
    assert [answer.status_code for answer in refused] == [401, 401]
    assert IdempotencyEntry.objects.count() == 0
    assert _post(client, path, key, _token(tokens[0])).status_code == 201


@SWITCH
@pytest.mark.parametrize("path", DRF_PATHS)
def test_two_drf_tokens_sending_one_key_through_the_middleware_never_share_an_answer(
    client: Client, tokens: tuple[str, str], path: str
) -> None:
    key = str(uuid.uuid4())
    answers = [_post(client, path, key, _token(token)) for token in tokens]
    assert [answer.status_code for answer in answers] == [201, 201]
    assert all("Idempotent-Replayed" not in answer for answer in answers)
    assert answers[0].content != answers[1].content
    assert Charge.objects.count() == 2


@SWITCH
@pytest.mark.parametrize("path", NINJA_PATHS)
def test_the_middleware_runs_a_ninja_operation_once_per_key_after_its_authentication(
    client: Client, path: str
) -> None:
    key = str(uuid.uuid4())
    first = _post(client, path, key, _api_key("alice"))
    again = _post(client, path, key, _api_key("alice"))
    other = _post(client, path, key, _api_key("alice"), amount=2)
    assert first.status_code == 201, first.content
    assert again["Idempotent-Replayed"] == "true"
    assert again.content == first.content
    assert other.status_code == 422
    assert Charge.objects.count() == 1


@SWITCH
@pytest.mark.parametrize("path", NINJA_PATHS)
def test_the_middleware_stores_nothing_for_an_unauthenticated_ninja_request(
    client: Client, path: str
) -> None:
    key = str(uuid.uuid4())
    refused = [_post(client, path, key), _post(client, path, key, _api_key("mallory"))]
    assert [answer.status_code for answer in refused] == [401, 401]
    assert IdempotencyEntry.objects.count() == 0
    assert _post(client, path, key, _api_key("alice")).status_code == 201


@SWITCH
@pytest.mark.parametrize("path", NINJA_PATHS)
def test_two_ninja_callers_sending_one_key_through_the_middleware_never_share_an_answer(
    client: Client, path: str
) -> None:
    key = str(uuid.uuid4())
    answers = [_post(client, path, key, _api_key(name)) for name in ("alice", "bob")]
    assert [answer.status_code for answer in answers] == [201, 201]
    assert all("Idempotent-Replayed" not in answer for answer in answers)
    assert Charge.objects.count() == 2


@SWITCH
def test_the_middleware_protects_an_async_function_view(client: Client) -> None:
    key = str(uuid.uuid4())
    first = _post(client, "/switch/async/", key)
    again = _post(client, "/switch/async/", key)
    assert first.status_code == 201, first.content
    assert again["Idempotent-Replayed"] == "true"
    assert _post(client, "/switch/async/", key, amount=2).status_code == 422
    assert Charge.objects.count() == 1


def _queries_of_one_post(client: Client, path: str, headers: dict[str, str]) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        assert _post(client, path, str(uuid.uuid4()), headers).status_code == 201
    return len(queries)


@SWITCH
@pytest.mark.parametrize(
    ("path", "caller"),
    [("/switch/drf-protected/", "token"), ("/switch/ninja/protected/charges", "api-key")],
)
def test_a_drf_or_ninja_view_protecting_itself_is_claimed_once_under_the_middleware(
    client: Client, settings: Any, tokens: tuple[str, str], path: str, caller: str
) -> None:
    headers = _token(tokens[0]) if caller == "token" else _api_key("alice")
    _queries_of_one_post(client, path, headers)  # warm: the secret, the content types
    under_middleware = _queries_of_one_post(client, path, headers)
    settings.MIDDLEWARE = [m for m in MIDDLEWARE if "Idempotency" not in m]
    alone = _queries_of_one_post(client, path, headers)
    assert under_middleware == alone
    assert IdempotencyEntry.objects.count() == Charge.objects.count() == 3


@SWITCH
@pytest.mark.parametrize(
    ("path", "caller"),
    [
        ("/switch/exempt-class/", "session"),
        ("/switch/exempt-viewset/", "token"),
        ("/switch/ninja/exempt/charges", "api-key"),
    ],
)
def test_an_exempt_view_class_viewset_or_ninja_operation_is_never_protected_by_the_middleware(
    client: Client, tokens: tuple[str, str], path: str, caller: str
) -> None:
    headers = {"token": _token(tokens[0]), "api-key": _api_key("alice")}.get(caller, {})
    key = str(uuid.uuid4())
    answers = [_post(client, path, key, headers) for _ in range(2)]
    assert [answer.status_code for answer in answers] == [201, 201]
    assert Charge.objects.count() == 2
    assert IdempotencyEntry.objects.count() == 0


@SWITCH
@pytest.mark.parametrize(
    ("path", "headers"),
    [("/switch/async/", {}), ("/switch/ninja/async/charges", _api_key("alice"))],
)
def test_the_middleware_protects_async_views_served_by_asgi(
    path: str, headers: dict[str, str]
) -> None:
    # Under ASGI, Django runs the (synchronous) middleware's process_view in a thread.
    post = async_to_sync(AsyncClient().post)
    key = str(uuid.uuid4())
    answers = [
        post(path, {"amount": 1}, content_type=JSON, headers={"Idempotency-Key": key, **headers})
        for _ in range(2)
    ]
    assert [answer.status_code for answer in answers] == [201, 201], answers[0].content
    assert answers[1]["Idempotent-Replayed"] == "true"
    assert Charge.objects.count() == 1


def test_an_exempt_async_view_stays_async_and_answers_as_itself() -> None:
    import asyncio
    import inspect

    async def charge(request: Any) -> str:
        return f"charged {request.method}"

    exempt = idempotency_exempt(charge)
    assert inspect.iscoroutinefunction(exempt)
    assert not protects(_keyed("/x"), exempt)
    assert asyncio.run(exempt(_keyed("/x"))) == "charged POST"


def test_a_keyed_post_to_ninjas_own_docs_views_is_left_to_ninja() -> None:
    api = NinjaAPI(urls_namespace="middleware-docs")

    @api.post("/x")
    def operation(request: Any) -> int:
        return 1

    views = _ninja_views(api)
    assert not protects(_keyed("/openapi.json"), views["openapi.json"])
    assert not protects(_keyed("/docs"), views["docs"])
    assert protects(_keyed("/x"), views["x"])
