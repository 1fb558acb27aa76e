"""One option table: every face takes the options declared once in ``ViewOptions``,
``MutationOptions`` and ``TaskOptions``, and refuses a wrong one alike, when applied."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from django.contrib import admin
from django.core.exceptions import ImproperlyConfigured
from django.views.generic import CreateView
from rest_framework.views import APIView

from idempotency_django import celery, django_tasks, graphene, ninja
from idempotency_django import idempotent as view_decorator
from idempotency_django._adapters.task_options import TASK_OPTIONS
from idempotency_django._protocol.options import (
    MUTATION_OPTIONS,
    TOOL_OPTIONS,
    VIEW_OPTIONS,
    Options,
)
from idempotency_django.admin import IdempotentAdminMixin
from idempotency_django.rest_framework import IdempotentMixin
from idempotency_django.strawberry import IdempotentExtension
from idempotency_django.views import IdempotentFormMixin
from tests.testapp.models import Charge

#: A value each view option refuses (an option added to the table must be added here).
WRONG: dict[str, Any] = {
    "header": 1,
    "required": "yes",
    "ttl": -1,
    "lease": -1,
    "tenant": 3,
    "database": 3,
    "cache": 3,
    "protocol": "nope",
    "wait": -1,
    "methods": "POST",
    "key": 3,
    "fingerprint": 3,
    "redact": 3,
}


def _form_view(options: Mapping[str, Any]) -> Options:
    view: Any = type("Form", (IdempotentFormMixin, CreateView), {"idempotency_options": options})
    return view.get_idempotency_options()  # type: ignore[no-any-return]


def _admin(options: Mapping[str, Any]) -> Options:
    model_admin: Any = type(
        "Admin", (IdempotentAdminMixin, admin.ModelAdmin), {"idempotency_options": options}
    )
    return model_admin(Charge, admin.AdminSite(name="option_table")).get_idempotency_options()  # type: ignore[no-any-return]


VIEW_FACES: dict[str, Callable[[dict[str, Any]], object]] = {
    "@idempotent": lambda options: view_decorator(**options),
    "ninja": lambda options: ninja.idempotent(**options),
    "form mixin": _form_view,
    "admin mixin": _admin,
}


def test_the_wrong_values_cover_the_table() -> None:
    assert set(WRONG) == set(VIEW_OPTIONS)
    assert set(TOOL_OPTIONS) < set(MUTATION_OPTIONS) < set(VIEW_OPTIONS)


@pytest.mark.parametrize("face", VIEW_FACES)
@pytest.mark.parametrize("name", VIEW_OPTIONS)
def test_every_view_face_refuses_a_wrong_value_naming_the_option(face: str, name: str) -> None:
    with pytest.raises((TypeError, ImproperlyConfigured), match=re.escape(f"({name}=...)")):
        VIEW_FACES[face]({name: WRONG[name]})


@pytest.mark.parametrize("face", VIEW_FACES)
def test_every_view_face_names_the_same_valid_options(face: str) -> None:
    with pytest.raises((TypeError, ImproperlyConfigured)) as error:
        VIEW_FACES[face]({"ttll": 5})
    assert str(error.value).endswith(
        f"got an unknown option 'ttll'; the options are: {', '.join(VIEW_OPTIONS)}."
    )


def test_the_drf_mixin_reads_each_attribute_it_declares() -> None:
    declared = [
        name
        for name in VIEW_OPTIONS
        if f"idempotency_{name}" in vars(IdempotentMixin) and name not in ("key", "tenant")
    ]
    assert declared  # header, ttl, methods...
    for name in declared:
        view: Any = type("Broken", (IdempotentMixin, APIView), {f"idempotency_{name}": WRONG[name]})
        with pytest.raises(ImproperlyConfigured, match=f"^Broken.idempotency_{name} "):
            view.get_idempotency_options()


@pytest.mark.parametrize("name", [n for n in VIEW_OPTIONS if n not in MUTATION_OPTIONS])
def test_a_graphql_mutation_takes_no_http_only_option(name: str) -> None:
    with pytest.raises(TypeError, match=f"unexpected keyword argument '{name}'"):
        IdempotentExtension(**{name: None})
    if name != "redact":  # Graphene's mutations have always taken it
        with pytest.raises(TypeError, match=f"takes no {name}= option"):
            graphene.idempotent(**{name: None})


@pytest.mark.parametrize("name", MUTATION_OPTIONS)
def test_a_graphql_mutation_takes_each_mutation_option(name: str) -> None:
    assert IdempotentExtension(**{name: None}).protection.options == Options()
    with pytest.raises(TypeError, match=re.escape(f"({name}=...)")):
        IdempotentExtension(**{name: WRONG[name]})
    with pytest.raises(TypeError, match=re.escape(f"({name}=...)")):
        graphene.idempotent(**{name: WRONG[name]})


@pytest.mark.parametrize("face", [celery.idempotent_task, django_tasks.idempotent_task])
def test_the_task_faces_take_the_task_options_and_name_themselves(face: Any) -> None:
    assert callable(face(**dict.fromkeys(TASK_OPTIONS[:2] + TASK_OPTIONS[3:])))
    with pytest.raises(
        TypeError, match=r"^idempotent_task\(\) got an unexpected keyword argument 'header'$"
    ):
        face(header="X-Key")


# ``key`` is the tool's own: a callable of its arguments, not a view's key extractor.
@pytest.mark.parametrize("name", [n for n in VIEW_OPTIONS if n not in (*TOOL_OPTIONS, "key")])
def test_an_mcp_tool_takes_the_tool_options_only(name: str) -> None:
    from idempotency_django import mcp

    with pytest.raises(
        TypeError, match=rf"^idempotent\(\) got an unexpected keyword argument '{name}'$"
    ):
        mcp.idempotent(**{name: None})


@pytest.mark.parametrize("name", TOOL_OPTIONS)
def test_an_mcp_tool_refuses_a_wrong_tool_option_naming_it(name: str) -> None:
    from idempotency_django import mcp

    assert callable(mcp.idempotent(**{name: None}))
    with pytest.raises(TypeError, match=re.escape(f"({name}=...)")):
        mcp.idempotent(**{name: WRONG[name]})


def test_graphene_refuses_an_unknown_option_as_python_would() -> None:
    with pytest.raises(
        TypeError, match=r"^idempotent\(\) got an unexpected keyword argument 'ttll'$"
    ):
        graphene.idempotent(ttll=5)  # type: ignore[call-overload]
