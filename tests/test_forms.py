"""Server-rendered forms, exactly once: the hidden key, @idempotent reading it, the mixin,
the fingerprint of a form, the refusal pages a person reads, and whose key space it is."""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from typing import Any, ClassVar
from urllib.parse import urlencode

import pytest
from django import forms
from django.core.files.uploadedfile import SimpleUploadedFile
from django.template import Context, Template
from django.test import Client, RequestFactory

from idempotency_django.forms import FIELD_NAME, IdempotencyKeyField, visitor
from idempotency_django.models import IdempotencyEntry
from tests.testapp.models import Charge

pytestmark = [
    pytest.mark.faces,
    pytest.mark.django_db,
    pytest.mark.urls("tests.testapp.form_views"),
]

BROWSER = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
_KEY = re.compile(r'name="idempotency_key" value="([^"]+)"')


def rendered_key(client: Client, path: str) -> str:
    """The key of the form ``path`` renders (a GET, as a browser opens the page)."""
    page = client.get(path)
    assert page.status_code == 200
    found = _KEY.findall(page.content.decode())
    assert len(found) == 1, page.content
    return str(found[0])


def submit(client: Client, path: str, key: str | None, **fields: Any) -> Any:
    """Post the form as a browser does (multipart, the test client's default; ``urlencoded=True``
    for the other); ``HTTP_*`` arguments are headers, the rest fields."""
    meta = {name: fields.pop(name) for name in list(fields) if name.startswith("HTTP_")}
    urlencoded = fields.pop("urlencoded", False)
    data = {"csrfmiddlewaretoken": "token", "reference": "order-1", "amount": "100", **fields}
    if key is not None:
        data[FIELD_NAME] = key
    if urlencoded:
        form = "application/x-www-form-urlencoded"
        return client.post(path, urlencode(data), form, HTTP_ACCEPT=BROWSER, **meta)
    return client.post(path, data, HTTP_ACCEPT=BROWSER, **meta)


# --- the key in every form -----------------------------------------------------------------------


def test_the_tag_renders_a_hidden_input_holding_a_fresh_uuid7_each_time() -> None:
    template = Template("{% load idempotency %}{% idempotency_key_field %}")
    first, second = (template.render(Context({})) for _ in range(2))
    keys = [_KEY.search(html).group(1) for html in (first, second)]  # type: ignore[union-attr]
    assert first.startswith('<input type="hidden" name="idempotency_key" value="')
    assert keys[0] != keys[1]
    assert all(uuid.UUID(key).version == 7 for key in keys)


def test_the_tag_includes_the_script_that_keeps_the_key_across_the_back_button(
    settings: Any,
) -> None:
    """Played in Chromium by tests/browser/test_forms.py (the admin's never-cached pages)."""
    settings.STATIC_URL = "/static/"
    html = Template("{% load idempotency %}{% idempotency_key_field %}").render(Context({}))
    assert html.endswith('<script src="/static/idempotency_django/form-keys.js" defer></script>')


def test_without_static_files_the_tag_renders_the_key_alone(settings: Any) -> None:
    """No STATIC_URL, no address for the script: the key works without it (no Back story)."""
    settings.STATIC_URL = None
    html = Template("{% load idempotency %}{% idempotency_key_field %}").render(Context({}))
    assert html.startswith('<input type="hidden" name="idempotency_key"')
    assert "<script" not in html


def test_a_form_with_the_key_field_has_the_script_in_its_media(settings: Any) -> None:
    class Form(forms.Form):
        idempotency_key = IdempotencyKeyField()

    settings.STATIC_URL = "/static/"
    assert str(Form().media) == '<script src="/static/idempotency_django/form-keys.js"></script>'


def test_the_form_field_renders_a_fresh_key_even_when_the_form_is_bound() -> None:
    class Form(forms.Form):
        idempotency_key = IdempotencyKeyField()

    bound = Form({"idempotency_key": "old-key"})
    html = str(bound["idempotency_key"])
    assert 'type="hidden"' in html
    assert "old-key" not in html
    assert bound.is_valid()


def test_a_form_rendered_once_and_posted_twice_runs_once_and_replays_the_redirect(
    client: Client,
) -> None:
    key = rendered_key(client, "/forms/charge/")
    first = submit(client, "/forms/charge/", key)
    reload = submit(client, "/forms/charge/", key)
    assert first.status_code == reload.status_code == 302
    assert reload["Location"] == first["Location"]
    assert reload["Idempotent-Replayed"] == "true"
    assert Charge.objects.count() == 1


def test_a_form_rendered_again_carries_a_new_key_and_makes_a_new_order(client: Client) -> None:
    submit(client, "/forms/charge/", rendered_key(client, "/forms/charge/"))
    submit(client, "/forms/charge/", rendered_key(client, "/forms/charge/"))
    assert Charge.objects.count() == 2


def test_the_header_still_wins_over_the_form_field(client: Client) -> None:
    key = str(uuid.uuid4())
    client.post(
        "/forms/charge/",
        {"reference": "a", "amount": "1", FIELD_NAME: "other"},
        headers={"Idempotency-Key": key},
    )
    assert IdempotencyEntry.objects.filter(key=key).exists()


def test_a_form_post_without_any_key_is_refused_as_a_missing_key(client: Client) -> None:
    response = client.post("/forms/charge/", {"reference": "a", "amount": "1"})
    assert response.status_code == 400
    assert response["Content-Type"] == "application/problem+json"
    assert b"idempotency_key field" in response.content
    assert Charge.objects.count() == 0


# --- the fingerprint of a form -------------------------------------------------------------------


def test_the_fingerprint_of_a_form_leaves_out_the_csrf_token(client: Client) -> None:
    key = rendered_key(client, "/forms/charge/")
    submit(client, "/forms/charge/", key, csrfmiddlewaretoken="first-page")
    again = submit(client, "/forms/charge/", key, csrfmiddlewaretoken="rotated-at-login")
    assert again["Idempotent-Replayed"] == "true"
    assert Charge.objects.count() == 1


def test_the_same_key_with_another_field_value_is_a_different_request(client: Client) -> None:
    key = rendered_key(client, "/forms/charge/")
    submit(client, "/forms/charge/", key)
    edited = client.post(
        "/forms/charge/", {"reference": "order-1", "amount": "999", FIELD_NAME: key}
    )
    assert edited.status_code == 422
    assert edited["Content-Type"] == "application/problem+json"


def test_a_multipart_form_reads_its_key_and_fingerprints_its_file_by_content(
    client: Client,
) -> None:
    key = str(uuid.uuid4())

    def send(content: bytes) -> Any:
        upload = SimpleUploadedFile("receipt.txt", content, content_type="text/plain")
        return client.post("/forms/upload/", {"reference": "r", "receipt": upload, FIELD_NAME: key})

    first, same = send(b"receipt"), send(b"receipt")
    other = send(b"another receipt")
    assert (first.status_code, same.status_code, other.status_code) == (302, 302, 422)
    assert same["Idempotent-Replayed"] == "true"
    assert Charge.objects.count() == 1


# --- refusals a person reads ---------------------------------------------------------------------


def test_a_back_button_resubmission_of_an_edited_form_gets_a_page_a_person_can_act_on(
    client: Client,
) -> None:
    key = rendered_key(client, "/forms/charge/")
    submit(client, "/forms/charge/", key)
    back = submit(
        client, "/forms/charge/", key, amount="250", HTTP_REFERER="http://testserver/forms/charge/"
    )
    assert back.status_code == 422
    assert back["Content-Type"].startswith("text/html")
    page = back.content.decode()
    assert "This form was already sent" in page
    assert 'href="/forms/charge/"' in page  # open a fresh form
    assert Charge.objects.count() == 1


def test_an_api_client_still_gets_problem_json_for_the_same_refusal(client: Client) -> None:
    key = rendered_key(client, "/forms/charge/")
    submit(client, "/forms/charge/", key)
    for accept in ("*/*", "application/json", None):
        extra: dict[str, Any] = {} if accept is None else {"HTTP_ACCEPT": accept}
        refused = client.post(
            "/forms/charge/", {"reference": "x", "amount": "2", FIELD_NAME: key}, **extra
        )
        assert refused.status_code == 422
        assert refused["Content-Type"] == "application/problem+json"


def test_a_malformed_key_in_a_browser_form_is_a_400_page(client: Client) -> None:
    refused = submit(
        client, "/forms/charge/", "not ascii: é", HTTP_REFERER="http://testserver/forms/charge/"
    )
    assert refused.status_code == 400
    assert refused["Content-Type"].startswith("text/html")
    assert b'<a href="/forms/charge/" id="fresh-form">Open a fresh form</a>' in refused.content


def test_a_keyless_browser_form_is_told_what_its_page_lacks_not_to_open_it_again(
    client: Client,
) -> None:
    """0.5 said "open the form afresh": the same page, lacking the tag, loops forever."""
    refused = submit(client, "/forms/charge/", None, HTTP_REFERER="http://testserver/forms/charge/")
    assert refused.status_code == 400
    page = refused.content.decode()
    assert "{% idempotency_key_field %}" in page
    assert "idempotency_key" in page
    assert "fresh-form" not in page
    assert "afresh" not in page


def test_an_api_endpoint_asked_for_html_gets_a_page_about_its_request_not_a_form(
    client: Client,
) -> None:
    """0.5 told a JSON endpoint's caller "This form was already sent", with a link to the
    endpoint's POST-only URL. A page fits what it refuses, and links only where a GET goes."""
    key = str(uuid.uuid4())
    client.post("/charges/", {"amount": 1}, "application/json", headers={"Idempotency-Key": key})
    refused = client.post(
        "/charges/",
        {"amount": 2},
        "application/json",
        headers={"Idempotency-Key": key, "Accept": BROWSER},
        HTTP_REFERER="http://testserver/shop/",
    )
    assert refused.status_code == 422
    assert refused["Content-Type"].startswith("text/html")
    page = refused.content.decode()
    assert "This request was already sent" in page
    assert "form" not in page.lower()
    assert "href=" not in page


@pytest.mark.urls("tests.testapp.switch_views")
def test_behind_the_switch_a_json_endpoint_asked_for_html_gets_a_page_about_its_request(
    client: Client, settings: Any
) -> None:
    """The issue's case: 0.5 answered "This form was already sent", linking the POST-only URL."""
    settings.MIDDLEWARE = [
        "django.contrib.sessions.middleware.SessionMiddleware",
        "django.contrib.auth.middleware.AuthenticationMiddleware",
        "idempotency_django.middleware.IdempotencyMiddleware",
    ]
    key = str(uuid.uuid4())
    first = client.post(
        "/switch/function/", {"amount": 1}, "application/json", headers={"Idempotency-Key": key}
    )
    assert first.status_code == 201
    refused = client.post(
        "/switch/function/",
        {"amount": 2},
        "application/json",
        headers={"Idempotency-Key": key, "Accept": BROWSER},
    )
    assert refused.status_code == 422
    page = refused.content.decode()
    assert "This request was already sent" in page
    assert "/switch/function/" not in page


def test_the_refusal_page_never_links_to_another_site() -> None:
    from idempotency_django._protocol.responses import problem_response
    from idempotency_django.exceptions import KeyReused

    request = RequestFactory().post(
        "/forms/charge/", HTTP_ACCEPT=BROWSER, HTTP_REFERER="https://evil.example/forms/charge/"
    )
    page = problem_response(KeyReused(), request).content.decode()
    assert "evil.example" not in page


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_the_refusal_page_links_back_to_the_sites_own_form_page(scheme: str) -> None:
    from idempotency_django._protocol.responses import problem_response
    from idempotency_django.exceptions import RequestInProgress

    back = f"{scheme}://testserver/shop/checkout/?step=2"
    request = RequestFactory().post("/forms/charge/", HTTP_ACCEPT=BROWSER, HTTP_REFERER=back)
    response = problem_response(RequestInProgress(retry_after=1), request)
    assert response.status_code == 409
    page = response.content.decode()
    assert "This form is still being sent" in page
    # The page the form was on (a GET renders it anew), not the POST's own address.
    assert '<a href="/shop/checkout/?step=2" id="fresh-form">Open a fresh form</a>' in page
    assert 'href="/forms/charge/"' not in page


def test_without_app_dirs_the_refusal_page_is_found_all_the_same(settings: Any) -> None:
    from idempotency_django._protocol.responses import problem_response
    from idempotency_django.exceptions import KeyReused

    settings.TEMPLATES = [{"BACKEND": "django.template.backends.django.DjangoTemplates"}]
    request = RequestFactory().post(
        "/forms/charge/", HTTP_ACCEPT=BROWSER, HTTP_REFERER="http://testserver/forms/charge/"
    )
    response = problem_response(KeyReused(), request)
    assert response.status_code == 422
    assert response["Content-Type"].startswith("text/html")
    page = response.content.decode()
    assert "This form was already sent" in page
    assert 'href="/forms/charge/" id="fresh-form"' in page
    assert response["Cache-Control"] == "no-store"


# --- the mixin for generic editing views ---------------------------------------------------------


def test_create_view_form_valid_runs_once_per_key(client: Client) -> None:
    key = str(uuid.uuid4())
    first = submit(client, "/forms/create/", key)
    second = submit(client, "/forms/create/", key)
    assert first.status_code == second.status_code == 302
    assert second["Location"] == first["Location"]
    assert second["Idempotent-Replayed"] == "true"
    assert Charge.objects.count() == 1


def test_an_invalid_form_is_answered_and_stores_nothing(client: Client) -> None:
    key = str(uuid.uuid4())
    invalid = submit(client, "/forms/create/", key, amount="not a number")
    assert invalid.status_code == 200
    assert not IdempotencyEntry.objects.filter(key=key).exists()
    corrected = submit(client, "/forms/create/", key)
    assert corrected.status_code == 302


def test_a_reload_of_a_created_object_replays_the_redirect_before_validating_again(
    client: Client,
) -> None:
    """0.5 validated the reload first: its unique reference "already exists" (a 200 page)."""
    key = rendered_key(client, "/forms/unique/")
    first = submit(client, "/forms/unique/", key, reference="unique-1")
    reload = submit(client, "/forms/unique/", key, reference="unique-1")
    assert first.status_code == reload.status_code == 302
    assert reload["Location"] == first["Location"]
    assert reload["Idempotent-Replayed"] == "true"
    assert Charge.objects.count() == 1


def test_a_form_shown_again_with_its_errors_is_not_stored_by_the_mixin_nor_the_decorator(
    client: Client,
) -> None:
    """One rule for a form re-rendered with its errors, however it is protected: nothing was
    done, so nothing is stored and its key stays free (the admin: test_admin_mixin)."""
    for path in ("/forms/create/", "/forms/formview/", "/forms/template-function/"):
        assert_shown_again_and_not_stored(client, path)


def test_behind_the_switch_a_form_shown_again_with_its_errors_is_not_stored(
    client: Client, settings: Any
) -> None:
    settings.MIDDLEWARE = [
        "django.contrib.sessions.middleware.SessionMiddleware",
        "django.contrib.auth.middleware.AuthenticationMiddleware",
        "idempotency_django.middleware.IdempotencyMiddleware",
    ]
    # Urlencoded: the only form body the switch reads a key from.
    assert_shown_again_and_not_stored(client, "/forms/plain-create/", urlencoded=True)
    key = str(uuid.uuid4())  # and a valid form is protected by the switch: replayed
    submit(client, "/forms/plain-create/", key, urlencoded=True)
    again = submit(client, "/forms/plain-create/", key, urlencoded=True)
    assert again["Idempotent-Replayed"] == "true"


def assert_shown_again_and_not_stored(client: Client, path: str, **how: Any) -> None:
    key = str(uuid.uuid4())
    invalid = submit(client, path, key, amount="not a number", **how)
    assert invalid.status_code == 200
    assert not IdempotencyEntry.objects.filter(key=key).exists(), path
    assert submit(client, path, key, **how).status_code == 302, path


def test_update_view_form_valid_runs_once_per_key(client: Client) -> None:
    charge = Charge.objects.create(reference="r", amount=1)
    key = str(uuid.uuid4())
    submit(client, f"/forms/update/{charge.pk}/", key, amount="5")
    Charge.objects.filter(pk=charge.pk).update(amount=7)  # changed since by someone else
    replay = submit(client, f"/forms/update/{charge.pk}/", key, amount="5")
    assert replay["Idempotent-Replayed"] == "true"
    assert Charge.objects.get(pk=charge.pk).amount == 7


def test_delete_view_form_valid_runs_once_per_key(client: Client) -> None:
    charge = Charge.objects.create(reference="r", amount=1)
    key = rendered_key(client, f"/forms/delete/{charge.pk}/")
    first = client.post(f"/forms/delete/{charge.pk}/", {FIELD_NAME: key})
    again = client.post(f"/forms/delete/{charge.pk}/", {FIELD_NAME: key})
    assert first.status_code == again.status_code == 302
    assert again["Idempotent-Replayed"] == "true"  # not a 404 for the object now gone
    assert not Charge.objects.exists()


def test_form_view_form_valid_runs_once_per_key(client: Client) -> None:
    key = rendered_key(client, "/forms/formview/")
    submit(client, "/forms/formview/", key)
    again = submit(client, "/forms/formview/", key)
    assert again["Idempotent-Replayed"] == "true"


def test_a_wrong_mixin_option_fails_when_the_urlconf_loads() -> None:
    from django.core.exceptions import ImproperlyConfigured

    from tests.testapp.form_views import ChargeCreate

    class Wrong(ChargeCreate):
        idempotency_options: ClassVar[Mapping[str, Any]] = {"wiat": 3}

    with pytest.raises(ImproperlyConfigured, match=r"Wrong\.idempotency_options"):
        Wrong.as_view()


def test_the_mixin_after_the_django_view_class_is_refused_when_the_class_is_made() -> None:
    """0.5 took ``class V(CreateView, IdempotentFormMixin)`` silently, and protected nothing:
    CreateView's post() came first (DRF's mixin refuses the same mistake)."""
    from django.core.exceptions import ImproperlyConfigured
    from django.views.generic import CreateView

    from idempotency_django.views import IdempotentFormMixin

    with pytest.raises(ImproperlyConfigured, match=r"put IdempotentFormMixin before"):

        class Late(CreateView, IdempotentFormMixin):  # type: ignore[type-arg]
            model = Charge
            fields = ("reference", "amount")


# --- who the caller is ---------------------------------------------------------------------------


def test_an_anonymous_visitors_form_keys_live_in_their_session(client: Client) -> None:
    key = rendered_key(client, "/forms/charge/")  # the tag starts the visitor's session
    submit(client, "/forms/charge/", key)
    entry = IdempotencyEntry.objects.get(key=key)
    session_key = client.session.session_key
    assert session_key
    assert entry.tenant.startswith("session:")
    assert session_key not in entry.tenant  # a credential: only its digest is stored


SESSION_ENGINES = [
    "django.contrib.sessions.backends.db",
    "django.contrib.sessions.backends.signed_cookies",
]


@pytest.mark.parametrize("engine", SESSION_ENGINES)
def test_inspect_idempotency_finds_a_visitors_form_post_by_their_session(
    client: Client, settings: Any, engine: str
) -> None:
    """0.5: an anonymous visitor's entries are under session:<digest>, which no operator can
    name for --tenant. Their session key (the cookie's value) names it now."""
    import io

    from django.core.management import call_command

    settings.SESSION_ENGINE = engine
    key = rendered_key(client, "/forms/charge/")
    submit(client, "/forms/charge/", key)
    cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
    out = io.StringIO()
    call_command("inspect_idempotency", key, "--session", cookie, stdout=out)
    assert "status:          completed" in out.getvalue()
    assert f"tenant:          '{IdempotencyEntry.objects.get(key=key).tenant}'" in out.getvalue()


def test_inspect_idempotency_says_when_a_session_holds_no_visitor() -> None:
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match="no form visitor"):
        call_command("inspect_idempotency", "some-key", "--session", "no-such-session")


@pytest.mark.parametrize("engine", SESSION_ENGINES)
@pytest.mark.parametrize("path", ["/forms/guest/", "/forms/guest-cycling/"])
def test_a_guests_back_button_resubmission_runs_once_though_the_view_changed_the_session(
    settings: Any, client: Client, engine: str, path: str
) -> None:
    # Signed-cookie sessions change their key on every write; cycle_key() changes any
    # backend's: the visitor's key space must outlive both.
    settings.SESSION_ENGINE = engine
    key = rendered_key(client, "/forms/charge/")  # the tag starts the visitor's session
    first = submit(client, path, key)
    again = submit(client, path, key)  # the back button, the same form sent again
    assert first.status_code == again.status_code == 302
    assert again["Location"] == first["Location"]
    assert again["Idempotent-Replayed"] == "true"
    assert Charge.objects.count() == 1


def test_a_visitors_key_space_is_the_visitor_id_in_the_session_not_the_session_key(
    client: Client,
) -> None:
    from idempotency_django.forms import SESSION_MARK

    key = rendered_key(client, "/forms/charge/")
    submit(client, "/forms/charge/", key)
    tenant = IdempotencyEntry.objects.get(key=key).tenant
    visitor_id = client.session[SESSION_MARK]
    assert isinstance(visitor_id, str)
    assert len(visitor_id) >= 32
    assert tenant.startswith("session:")
    assert visitor_id not in tenant
    rendered_key(client, "/forms/charge/")
    assert client.session[SESSION_MARK] == visitor_id  # drawn once, kept


def test_another_visitor_sending_the_same_key_never_gets_the_first_visitors_answer() -> None:
    first, other = Client(), Client()
    key = rendered_key(first, "/forms/charge/")
    rendered_key(other, "/forms/charge/")
    submit(first, "/forms/charge/", key)
    theirs = submit(other, "/forms/charge/", key)
    assert "Idempotent-Replayed" not in theirs
    assert Charge.objects.count() == 2


def test_a_logged_in_users_form_keys_live_in_the_users_key_space(
    client: Client, django_user_model: Any
) -> None:
    user = django_user_model.objects.create_user("ann")
    client.force_login(user)
    key = rendered_key(client, "/forms/charge/")
    submit(client, "/forms/charge/", key)
    assert IdempotencyEntry.objects.get(key=key).tenant == str(user.pk)


def test_the_visitor_without_a_session_shares_the_anonymous_key_space() -> None:
    request = RequestFactory().post("/")
    assert visitor(request) == ""


# --- the start-up check --------------------------------------------------------------------------


def test_forms_without_sessions_warn_at_start_up(settings: Any) -> None:
    from idempotency_django._operations.checks import check_form_sessions

    settings.MIDDLEWARE = ["idempotency_django.middleware.IdempotencyMiddleware"]
    [warning] = check_form_sessions()
    assert warning.id == "idempotency_django.W090"


def test_forms_with_sessions_or_an_own_resolver_do_not_warn(settings: Any) -> None:
    from idempotency_django._operations.checks import check_form_sessions

    assert check_form_sessions() == []  # the test settings have sessions
    settings.MIDDLEWARE = []
    settings.IDEMPOTENCY_TENANT_RESOLVER = "idempotency_django.tenants.user_pk"
    assert check_form_sessions() == []


# --- waiting out a double-click, htmx, the fingerprint itself ------------------------------------


def test_a_form_posts_duplicate_waits_for_the_first_by_default_but_a_views_wait_stands() -> None:
    from idempotency_django._protocol.options import Options
    from idempotency_django.forms import FORM_WAIT, form_policy

    form = RequestFactory().post("/", {"a": "1"})
    api = RequestFactory().post("/", "{}", content_type="application/json")
    default, own = Options(), Options.build(wait=0)
    assert form_policy(form, default.resolve(form), default).wait == FORM_WAIT
    assert form_policy(api, default.resolve(api), default).wait == default.resolve(api).wait
    assert form_policy(form, own.resolve(form), own).wait == 0


def test_a_form_posts_key_space_is_the_visitor_unless_the_view_names_its_own() -> None:
    from idempotency_django._protocol.options import Options
    from idempotency_django.forms import form_policy

    def by_shop(request: Any) -> str:
        return "shop-1"

    form = RequestFactory().post("/", {"a": "1"})
    default, own = Options(), Options.build(tenant=by_shop, wait=0)
    assert form_policy(form, default.resolve(form), default).tenant is visitor
    policy = own.resolve(form)
    assert form_policy(form, policy, own) is policy
    assert policy.tenant(form) == "shop-1"


def test_a_refusal_while_the_first_still_runs_is_a_page_that_says_so() -> None:
    from idempotency_django._protocol.responses import problem_response
    from idempotency_django.exceptions import RequestInProgress

    request = RequestFactory().post("/forms/charge/", HTTP_ACCEPT=BROWSER)
    page = problem_response(RequestInProgress(retry_after=2), request)
    assert page.status_code == 409
    assert page["Retry-After"] == "2"
    assert "still being sent" in page.content.decode()


def test_an_htmx_form_post_carries_the_hidden_key_as_any_form_does(client: Client) -> None:
    key = rendered_key(client, "/forms/charge/")
    data = {"reference": "htmx", "amount": "3", FIELD_NAME: key}
    htmx: dict[str, Any] = {"HTTP_HX_REQUEST": "true", "HTTP_ACCEPT": "*/*"}
    first, again = (
        client.post("/forms/charge/", data, **htmx),
        client.post("/forms/charge/", data, **htmx),
    )
    assert (first.status_code, again["Idempotent-Replayed"]) == (302, "true")
    edited = client.post("/forms/charge/", {**data, "amount": "4"}, **htmx)
    assert edited["Content-Type"] == "application/problem+json"  # htmx: */*, not a page


@pytest.mark.parametrize("multipart", [False, True])
def test_the_fingerprint_of_a_form_leaves_out_the_token_and_the_key_but_not_its_fields(
    multipart: bool,
) -> None:
    from django.test.client import MULTIPART_CONTENT

    from idempotency_django._protocol.fingerprint import request_fingerprint

    def digest(**fields: str) -> str:
        factory = RequestFactory()
        if multipart:
            request = factory.post("/", fields, content_type=MULTIPART_CONTENT)
        else:
            request = factory.post("/", fields)
        return request_fingerprint(request)

    base = digest(amount="1", csrfmiddlewaretoken="a", idempotency_key="k1")
    assert digest(amount="1", csrfmiddlewaretoken="b", idempotency_key="k2") == base
    assert digest(amount="1") == base
    assert digest(amount="2", csrfmiddlewaretoken="a", idempotency_key="k1") != base
