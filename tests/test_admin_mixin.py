"""IdempotentAdminMixin: a ModelAdmin's add, change and delete views and its actions run
once per rendered form; protect_admin() gives every registered ModelAdmin the mixin."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar
from urllib.parse import urlencode

import pytest
from django.test import Client

from idempotency_django.admin import IdempotentAdminMixin, protect_admin
from idempotency_django.forms import FIELD_NAME
from tests.testapp.form_views import plain_admin
from tests.testapp.models import Charge

pytestmark = [
    pytest.mark.faces,
    pytest.mark.django_db,
    pytest.mark.urls("tests.testapp.form_views"),
]

_KEYS = re.compile(r'name="idempotency_key" value="([^"]+)"')


@pytest.fixture
def staff(client: Client, django_user_model: Any) -> Client:
    user = django_user_model.objects.create_superuser("admin", "a@example.com", "pw")
    client.force_login(user)
    return client


def keys_of(client: Client, path: str) -> list[str]:
    """The keys of the page's forms that post, less the header's logout form (the first)."""
    page = client.get(path)
    assert page.status_code == 200
    keys = _KEYS.findall(page.content.decode())
    assert len(keys) == 2, keys  # logout, then the page's own form
    return keys[1:]


def test_the_admin_change_form_renders_a_fresh_key_in_its_form(staff: Client) -> None:
    first, second = (
        keys_of(staff, "/forms-admin/testapp/charge/add/"),
        keys_of(staff, "/forms-admin/testapp/charge/add/"),
    )
    assert len(first) == len(second) == 1
    assert first != second


@pytest.mark.parametrize("page", ["add/", "1/change/", "1/delete/", ""])
def test_every_protected_admin_page_loads_the_script_that_keeps_its_keys(
    staff: Client, page: str, settings: Any
) -> None:
    """The admin's pages are never cached: Back fetches them again (tests/browser)."""
    settings.STATIC_URL = "/static/"
    Charge.objects.create(pk=1, reference="r", amount=1)
    html = staff.get(f"/forms-admin/testapp/charge/{page}").content.decode()
    assert '<script src="/static/idempotency_django/form-keys.js"></script>' in html


def test_the_admin_add_form_saved_twice_adds_one_row(staff: Client) -> None:
    [key] = keys_of(staff, "/forms-admin/testapp/charge/add/")
    data = {"reference": "r", "amount": "3", "_save": "Save", FIELD_NAME: key}
    first = staff.post("/forms-admin/testapp/charge/add/", data)
    again = staff.post("/forms-admin/testapp/charge/add/", data)
    assert first.status_code == again.status_code == 302
    assert again["Idempotent-Replayed"] == "true"
    assert Charge.objects.count() == 1


def test_the_admin_change_form_saved_twice_changes_once(staff: Client) -> None:
    charge = Charge.objects.create(reference="r", amount=1)
    path = f"/forms-admin/testapp/charge/{charge.pk}/change/"
    [key] = keys_of(staff, path)
    data = {"reference": "r", "amount": "5", "_save": "Save", FIELD_NAME: key}
    staff.post(path, data)
    Charge.objects.filter(pk=charge.pk).update(amount=9)
    again = staff.post(path, data)
    assert again["Idempotent-Replayed"] == "true"
    assert Charge.objects.get(pk=charge.pk).amount == 9


def test_the_admin_delete_confirmed_twice_is_a_replay_not_an_error(staff: Client) -> None:
    charge = Charge.objects.create(reference="r", amount=1)
    path = f"/forms-admin/testapp/charge/{charge.pk}/delete/"
    [key] = keys_of(staff, path)
    first = staff.post(path, {"post": "yes", FIELD_NAME: key})
    again = staff.post(path, {"post": "yes", FIELD_NAME: key})
    assert first.status_code == again.status_code == 302
    assert again["Idempotent-Replayed"] == "true"
    assert not Charge.objects.exists()


def test_an_admin_action_posted_twice_runs_once(staff: Client) -> None:
    charge = Charge.objects.create(reference="r", amount=1)
    [key] = keys_of(staff, "/forms-admin/testapp/charge/")
    data = {"action": "double_amounts", "_selected_action": [str(charge.pk)], FIELD_NAME: key}
    staff.post("/forms-admin/testapp/charge/", data)
    again = staff.post("/forms-admin/testapp/charge/", data)
    assert again["Idempotent-Replayed"] == "true"
    assert Charge.objects.get(pk=charge.pk).amount == 2


@pytest.mark.parametrize("page", ["add", "change", "changelist"])
def test_an_admin_form_shown_again_with_its_errors_is_not_stored(staff: Client, page: str) -> None:
    """0.5 stored the 200 of an invalid admin form and replayed it; the form mixin did not.
    One rule now (test_forms): nothing was done, nothing is stored, the key stays free."""
    charge = Charge.objects.create(reference="r", amount=1)
    path, fields = {
        "add": ("/forms-admin/testapp/charge/add/", {"reference": "r", "_save": "Save"}),
        "change": (f"/forms-admin/testapp/charge/{charge.pk}/change/", {"reference": "r"}),
        "changelist": ("/forms-admin/testapp/charge/", _changelist_save(charge.pk)),
    }[page]
    [key] = keys_of(staff, path)
    invalid = staff.post(path, {**fields, _amount(page): "not a number", FIELD_NAME: key})
    assert invalid.status_code == 200
    assert b"errornote" in invalid.content  # Django's "Please correct the error(s) below."
    corrected = staff.post(path, {**fields, _amount(page): "4", FIELD_NAME: key})
    assert corrected.status_code == 302
    assert "Idempotent-Replayed" not in corrected


def _amount(page: str) -> str:
    return "form-0-amount" if page == "changelist" else "amount"


def _changelist_save(pk: int) -> dict[str, str]:
    """``list_editable``'s save of one row (its management form and the row's fields)."""
    return {
        "form-TOTAL_FORMS": "1",
        "form-INITIAL_FORMS": "1",
        "form-0-id": str(pk),
        "_save": "Save",
    }


def test_an_admin_post_without_a_key_runs_as_the_admin_always_did(staff: Client) -> None:
    data = {"reference": "r", "amount": "3", "_save": "Save"}
    staff.post("/forms-admin/testapp/charge/add/", data)
    staff.post("/forms-admin/testapp/charge/add/", data)
    assert Charge.objects.count() == 2


def test_protect_admin_gives_every_registered_model_admin_the_mixin(staff: Client) -> None:
    assert all(isinstance(m, IdempotentAdminMixin) for m in plain_admin._registry.values())
    [key] = keys_of(staff, "/plain-admin/testapp/charge/add/")
    data = {"reference": "r", "amount": "3", "_save": "Save", FIELD_NAME: key}
    staff.post("/plain-admin/testapp/charge/add/", data)
    staff.post("/plain-admin/testapp/charge/add/", data)
    assert Charge.objects.count() == 1


def test_the_admin_login_check_runs_before_the_protection(client: Client) -> None:
    response = client.post("/forms-admin/testapp/charge/add/", {FIELD_NAME: "k"})
    assert response.status_code == 302
    assert "/login/" in response["Location"]


def test_the_delete_selected_confirmation_confirmed_twice_is_a_replay(staff: Client) -> None:
    charge = Charge.objects.create(reference="r", amount=1)
    chosen = {"action": "delete_selected", "_selected_action": [str(charge.pk)]}
    [list_key] = keys_of(staff, "/forms-admin/testapp/charge/")
    confirmation = staff.post("/forms-admin/testapp/charge/", {**chosen, FIELD_NAME: list_key})
    keys = _KEYS.findall(confirmation.content.decode())
    assert len(keys) == 2  # logout, and the confirmation's own form
    confirm = {**chosen, "post": "yes", FIELD_NAME: keys[1]}
    first = staff.post("/forms-admin/testapp/charge/", confirm)
    again = staff.post("/forms-admin/testapp/charge/", confirm)
    assert first.status_code == again.status_code == 302
    assert again["Idempotent-Replayed"] == "true"
    assert not Charge.objects.exists()


def test_the_admin_add_form_is_saved_once_and_replayed_under_the_middleware(
    staff: Client, settings: Any
) -> None:
    # The mixin protects its views itself: the middleware leaves them to it (one claim).
    settings.MIDDLEWARE = [
        *settings.MIDDLEWARE,
        "idempotency_django.middleware.IdempotencyMiddleware",
    ]
    [key] = keys_of(staff, "/forms-admin/testapp/charge/add/")
    data = {"reference": "r", "amount": "3", "_save": "Save", FIELD_NAME: key}
    # Urlencoded, as a browser posts it: the switch reads this body's key field.
    body, form = urlencode(data), "application/x-www-form-urlencoded"
    first = staff.post("/forms-admin/testapp/charge/add/", body, form)
    again = staff.post("/forms-admin/testapp/charge/add/", body, form)
    assert first.status_code == again.status_code == 302
    assert again["Idempotent-Replayed"] == "true"
    assert Charge.objects.count() == 1


def test_protect_admin_leaves_a_model_admin_that_has_the_mixin_with_its_own_options() -> None:
    from django.contrib import admin

    class OwnAdmin(IdempotentAdminMixin, admin.ModelAdmin):  # type: ignore[type-arg]
        idempotency_options: ClassVar[Mapping[str, Any]] = {"required": True}

    site = admin.AdminSite(name="own_options_admin")
    site.register(Charge, OwnAdmin)
    protect_admin(site)
    model_admin = site._registry[Charge]
    assert type(model_admin) is OwnAdmin
    assert model_admin.get_idempotency_options().required is True


def test_a_wrong_admin_option_names_the_model_admin() -> None:
    from django.contrib import admin
    from django.core.exceptions import ImproperlyConfigured

    class WrongAdmin(IdempotentAdminMixin, admin.ModelAdmin):  # type: ignore[type-arg]
        idempotency_options: ClassVar[Mapping[str, Any]] = {"ttl_seconds": 3}

    model_admin = WrongAdmin(Charge, admin.AdminSite(name="wrong_options_admin"))
    with pytest.raises(
        ImproperlyConfigured, match=r"WrongAdmin\.idempotency_options: .*ttl_seconds"
    ):
        model_admin.get_idempotency_options()


def test_the_mixin_after_the_model_admin_class_is_refused_when_the_class_is_made() -> None:
    """0.5 took ``class A(admin.ModelAdmin, IdempotentAdminMixin)`` silently: the admin's
    views came first, and nothing was protected."""
    from django.contrib import admin
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(ImproperlyConfigured, match=r"put IdempotentAdminMixin before"):

        class Late(admin.ModelAdmin, IdempotentAdminMixin):  # type: ignore[type-arg]
            pass
