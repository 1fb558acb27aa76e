"""Django Ninja: the principal's type is part of its tenant.

A second user-like model's row 1 is not the session's user 1, and the credential
``7`` is not the credential ``"7"``: each is answered its own execution, never the
other's stored answer.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import models
from django.http import HttpRequest
from django.test import Client
from django.test.utils import isolate_apps
from django.urls import path
from ninja import NinjaAPI
from ninja.security import django_auth

from idempotency_django.ninja import idempotent, principal_tenant
from tests.helpers import charges, new_key
from tests.testapp.models import Charge

pytestmark = [
    pytest.mark.faces,
    pytest.mark.django_db(transaction=True),
    pytest.mark.urls(__name__),
]

with isolate_apps("tests.testapp"):

    class ApiClient(AbstractBaseUser):
        """A second user-like model (machine clients), with pks of its own."""

        USERNAME_FIELD = "name"
        name = models.CharField(max_length=40, unique=True)

        class Meta:
            app_label = "testapp"


def api_client(request: HttpRequest) -> object:
    """``X-Client: 1`` is the machine client of pk 1 (unsaved: only its type and pk count)."""
    pk = request.headers.get("X-Client")
    return ApiClient(pk=int(pk), name=f"client-{pk}") if pk else None


def credential(request: HttpRequest) -> object:
    """``X-Credential: int:7`` authenticates as the number 7, ``str:7`` as the string "7"."""
    kind, _, value = request.headers.get("X-Credential", "").partition(":")
    return {"int": int, "str": str}[kind](value) if value else None


api = NinjaAPI(urls_namespace="ninja-principals")


@api.post("/charges", auth=[api_client, django_auth, credential])
@idempotent
def charge(request: HttpRequest) -> dict[str, Any]:
    made = Charge.objects.create(reference=request.headers["X-Ref"], amount=1)
    return {"id": made.pk, "tenant": request.idempotency.tenant}  # type: ignore[attr-defined]


urlpatterns = [path("api/", api.urls)]


def send(client: Client, key: str, **headers: str) -> Any:
    return client.post(
        "/api/charges",
        json.dumps({"amount": 1}),
        content_type="application/json",
        headers={"Idempotency-Key": key, "X-Ref": key, **headers},
    )


def test_a_second_user_models_row_never_shares_the_session_users_key_space(
    django_user_model: Any,
) -> None:
    user = django_user_model.objects.create_user("first", pk=1)
    session = Client()
    session.force_login(user)
    key = new_key()
    assert send(session, key).status_code == 200

    machine = send(Client(), key, **{"X-Client": "1"})

    assert machine.status_code == 200
    assert "Idempotent-Replayed" not in machine
    assert json.loads(machine.content)["tenant"] == "testapp.apiclient:1"
    assert charges(key) == 2


def test_the_number_and_the_string_of_one_credential_are_two_callers() -> None:
    key = new_key()
    assert send(Client(), key, **{"X-Credential": "int:7"}).status_code == 200

    as_string = send(Client(), key, **{"X-Credential": "str:7"})

    assert as_string.status_code == 200
    assert "Idempotent-Replayed" not in as_string
    assert charges(key) == 2


def test_each_kind_of_principal_has_a_tenant_of_its_own(django_user_model: Any) -> None:
    user = django_user_model(pk=1)
    assert principal_tenant(user) == "1"  # the session resolver's key space
    assert principal_tenant(ApiClient(pk=1)) == "testapp.apiclient:1"
    tenants = {principal_tenant(value) for value in (7, "7", b"7", 8)}
    assert len(tenants) == 4
    assert principal_tenant("7").startswith("credential:str:")
    assert principal_tenant(7).startswith("credential:int:")


def test_a_credential_of_a_subclass_has_its_base_kind() -> None:
    class Token(str):
        """An API key type of the project's own."""

    assert principal_tenant(Token("7")) == principal_tenant("7")
