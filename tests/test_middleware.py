"""IdempotencyMiddleware: every unsafe request that carries a key, protected as @idempotent
would; views that protect themselves, opt out, or authenticate inside left alone."""

from __future__ import annotations

import uuid
from typing import Any, ClassVar

import pytest
from django.test import Client
from django.views import View
from ninja import NinjaAPI
from rest_framework.decorators import api_view
from rest_framework.response import Response
from rest_framework.views import APIView

from idempotency_django import idempotency_exempt, idempotent
from idempotency_django.forms import FIELD_NAME
from idempotency_django.middleware import protects
from idempotency_django.views import IdempotentFormMixin
from tests.testapp.models import Charge

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.testapp.form_views")]

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


def _form(key: str | None, **fields: str) -> dict[str, str]:
    data = {"reference": "order-1", **fields}
    return data if key is None else {**data, FIELD_NAME: key}


def test_the_middleware_protects_a_plain_view_posted_with_a_form_key(client: Client) -> None:
    key = str(uuid.uuid4())
    first = client.post("/forms/plain/", _form(key))
    again = client.post("/forms/plain/", _form(key))
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
    client.post("/forms/exempt/", _form(key))
    client.post("/forms/exempt/", _form(key))
    assert Charge.objects.count() == 2


def test_idempotency_exempt_is_exported_from_the_package() -> None:
    import idempotency_django

    assert idempotency_django.idempotency_exempt is idempotency_exempt


def test_a_view_that_protects_itself_is_protected_once_not_twice(client: Client) -> None:
    key = str(uuid.uuid4())
    first = client.post("/forms/create/", _form(key, amount="1"))
    again = client.post("/forms/create/", _form(key, amount="1"))
    assert again["Idempotent-Replayed"] == "true"
    assert first.status_code == 302
    assert Charge.objects.count() == 1


class _Request:
    method = "POST"
    content_type = "application/json"
    META: ClassVar[dict[str, str]] = {"HTTP_IDEMPOTENCY_KEY": "k"}
    headers: ClassVar[dict[str, str]] = {"Idempotency-Key": "k"}


def _view(request: Any) -> Any:
    raise AssertionError("not called")


class _DrfView(APIView):
    pass


@api_view(["POST"])
def _drf_function(request: Any) -> Response:
    return Response()


class _FormView(IdempotentFormMixin, View):
    pass


def test_the_middleware_never_protects_a_drf_view_before_its_authentication() -> None:
    assert protects(_Request(), _view)  # type: ignore[arg-type]
    assert not protects(_Request(), _DrfView.as_view())  # type: ignore[arg-type]
    assert not protects(_Request(), _drf_function)  # type: ignore[arg-type]


def test_the_middleware_never_protects_a_ninja_operation_before_its_authentication() -> None:
    api = NinjaAPI(urls_namespace="middleware-test")

    @api.post("/x")
    def operation(request: Any) -> int:
        return 1

    views: list[Any] = [getattr(pattern, "callback", None) for pattern in api.urls[0]]
    assert any(views)
    assert not any(protects(_Request(), view) for view in views if view)  # type: ignore[arg-type]


def test_the_middleware_leaves_decorated_and_mixin_views_to_protect_themselves() -> None:
    assert not protects(_Request(), idempotent(_view))  # type: ignore[arg-type]
    assert not protects(_Request(), _FormView.as_view())  # type: ignore[arg-type]


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
        answers.append(client.post("/forms/plain/", _form(key, reference=name)))
    assert all("Idempotent-Replayed" not in answer for answer in answers)
    assert Charge.objects.count() == 2


def test_an_empty_key_header_is_refused_by_the_middleware_as_idempotent_would(
    client: Client,
) -> None:
    refused = client.post("/forms/plain/", _form(None), headers={"Idempotency-Key": ""})
    assert refused.status_code == 400
    assert Charge.objects.count() == 0
