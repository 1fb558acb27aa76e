"""The package as a whole: migrations, optional imports, decorator options, nested atomics."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.http import HttpRequest, HttpResponse
from django.test import Client, RequestFactory
from django.utils.timezone import now

from idempotency_django import idempotent
from idempotency_django._protocol.responses import require_plain
from idempotency_django.models import IdempotencyEntry
from tests.helpers import charges, new_key, post

pytestmark = pytest.mark.versions


@pytest.mark.django_db
def test_no_migration_is_missing() -> None:
    out = StringIO()
    call_command("makemigrations", "--check", "--dry-run", stdout=out)
    assert "No changes detected" in out.getvalue()


@pytest.mark.django_db
def test_a_server_still_on_0_1_can_claim_after_migration_0002() -> None:
    """A rolling upgrade migrates first: 0.1.0's claim INSERT names no response_reason."""
    quote = connection.ops.quote_name
    table = quote(IdempotencyEntry._meta.db_table)
    names = ("tenant", "key", "fingerprint", "status", "owner", "response_headers")
    columns = ", ".join(
        quote(name) for name in (*names, "locked_until", "created_at", "expires_at")
    )
    at = connection.ops.adapt_datetimefield_value(now())
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({columns}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
            ["", "old-server", "f" * 64, "in_progress", uuid.uuid4().hex, "[]", *[at] * 3],
        )
    assert IdempotencyEntry.objects.get(key="old-server").response_reason == ""


def test_importing_the_package_needs_no_optional_dependency() -> None:
    code = (
        "import sys\n"
        "for name in ('rest_framework', 'celery', 'django_redis', 'redis', 'drf_spectacular'):\n"
        "    sys.modules[name] = None\n"
        "import django; from django.conf import settings\n"
        "settings.configure(INSTALLED_APPS=['idempotency_django'], DATABASES={})\n"
        "django.setup()\n"
        "import idempotency_django, idempotency_django._protocol.core, idempotency_django.models\n"
        "from idempotency_django import idempotent\n"
        "print('ok')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert result.stdout.strip() == "ok", result.stderr


def view(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"ttl": 0}, "positive"),
        ({"ttl": float("nan")}, "positive and at most 100 years"),
        ({"ttl": 10**12}, "positive and at most 100 years"),
        ({"wait": float("inf")}, "0 up to a day"),
        ({"lease": "60"}, "seconds or a timedelta"),
        ({"methods": "POST"}, "takes a list"),
        ({"methods": ["GET", "POST"]}, "safe methods"),
        ({"required": "yes"}, "must be a bool"),
        ({"key": "header"}, "callable"),
        ({"tenant": 3}, "callable"),
        ({"fingerprint": "x"}, "callable"),
        ({"database": 1}, "must be a str"),
        ({"ttl": 10, "lease": 10}, "shorter than @idempotent"),
        ({"protocol": "sqlite"}, 'must be "lock" or "lease", got \'sqlite\''),
    ],
)
def test_wrong_options_fail_when_applied(options: dict[str, Any], message: str) -> None:
    with pytest.raises(TypeError, match=message):
        idempotent(**options)


def test_lease_not_shorter_than_ttl_names_both_arguments_and_their_values() -> None:
    expected = (
        "@idempotent(lease=...) must be shorter than @idempotent(ttl=...); "
        "got 90 seconds and 60 seconds."
    )
    with pytest.raises(TypeError) as error:
        idempotent(ttl=60, lease=timedelta(seconds=90))
    assert str(error.value) == expected


def test_unknown_option_names_the_decorator_and_the_valid_options() -> None:
    with pytest.raises(TypeError) as error:
        idempotent(ttll=5)  # type: ignore[call-overload]
    message = str(error.value)
    assert message.startswith("@idempotent(...) got an unknown option 'ttll'; the options are: ")
    assert "Options" not in message
    for option in ("header", "required", "ttl", "lease", "methods", "key", "fingerprint"):
        assert option in message.partition("the options are: ")[2].rstrip(".").split(", ")


class _UnhashableKey:
    """A key extractor that is a callable object defining ``__eq__``: not hashable."""

    def __init__(self, header: str) -> None:
        self.header = header

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _UnhashableKey) and other.header == self.header

    def __call__(self, request: HttpRequest) -> str | None:
        return request.headers.get(self.header)


def test_an_unhashable_option_is_used_as_given_and_follows_the_settings() -> None:
    from django.test import override_settings

    from idempotency_django._protocol.options import Options

    extractor = _UnhashableKey("X-Order")
    options = Options.build(key=extractor, ttl=120)
    policy = options.resolve()
    assert policy.key is extractor
    assert policy.ttl == timedelta(seconds=120)
    with override_settings(IDEMPOTENCY_HEADER="X-Request-Key"):
        assert options.resolve().header == "X-Request-Key"
    assert options.resolve().header == "Idempotency-Key"


def test_options_built_per_request_do_not_grow_the_compiled_policies_without_bound() -> None:
    from idempotency_django._protocol.options import _COMPILED, Options

    def extractor_for(n: int) -> Any:
        return lambda request: str(n)  # a new callable each time: a new Options value

    policies = [Options.build(key=extractor_for(n)).resolve() for n in range(1100)]
    assert len(_COMPILED) <= 1024
    assert policies[-1].key is not None
    assert policies[-1].key(RequestFactory().get("/")) == "1099"


def test_unknown_options_are_all_named() -> None:
    with pytest.raises(TypeError, match="got unknown options 'bogus', 'ttll'; the options"):
        idempotent(ttll=5, bogus=1)  # type: ignore[call-overload]


@pytest.mark.parametrize(
    ("module", "missing", "extra"),
    [
        ("idempotency_django.rest_framework", "rest_framework", "drf"),
        ("idempotency_django.tasks", "celery", "celery"),
        ("idempotency_django.celery", "celery", "celery"),
        ("idempotency_django.ninja", "ninja", "ninja"),
    ],
)
def test_importing_an_integration_without_its_extra_says_what_to_install(
    module: str, missing: str, extra: str
) -> None:
    code = (
        "import sys\n"
        f"sys.modules[{missing!r}] = None\n"
        "import django; from django.conf import settings\n"
        "settings.configure(INSTALLED_APPS=['idempotency_django'], DATABASES={})\n"
        "django.setup()\n"
        "try:\n"
        f"    import {module}\n"
        "except ModuleNotFoundError as error:\n"
        "    print(type(error).__name__, error.name, error, sep='|')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    kind, name, message = result.stdout.strip().split("|")
    assert (kind, name) == ("ModuleNotFoundError", missing), result.stderr
    assert message.startswith(f"{module} needs ")
    assert message.endswith(f"pip install 'idempotency-django[{extra}]'")


def test_the_missing_extra_is_named_with_its_install_line() -> None:
    from idempotency_django._adapters.extras import raise_missing_extra

    error = ModuleNotFoundError("No module named 'rest_framework'", name="rest_framework")
    with pytest.raises(ModuleNotFoundError) as raised:
        raise_missing_extra(error, "idempotency_django.rest_framework", "drf")
    assert str(raised.value) == (
        "idempotency_django.rest_framework needs Django REST framework, which is not installed: "
        "pip install 'idempotency-django[drf]'"
    )
    assert raised.value.name == "rest_framework"
    assert raised.value.__cause__ is error


def test_a_missing_module_that_is_not_the_extra_is_raised_unchanged() -> None:
    from idempotency_django._adapters.extras import raise_missing_extra

    error = ModuleNotFoundError("No module named 'kombu'", name="kombu")
    with pytest.raises(ModuleNotFoundError) as raised:
        raise_missing_extra(error, "idempotency_django.tasks", "celery")
    assert raised.value is error


def test_version_is_the_installed_distributions() -> None:
    from importlib.metadata import version

    import idempotency_django

    assert idempotency_django.__version__ == version("idempotency-django")
    assert "__version__" in idempotency_django.__all__


def test_importing_the_package_and_reading_its_version_imports_no_model() -> None:
    code = (
        "import sys, idempotency_django\n"
        "assert idempotency_django.__version__\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(('django.db', 'idempotency_django.')))\n"
        "print(loaded)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert result.stdout.strip() == "[]", result.stderr


def test_an_unknown_attribute_of_the_package_is_an_attribute_error() -> None:
    import idempotency_django

    with pytest.raises(AttributeError):
        idempotency_django.nothing_here  # noqa: B018


def test_positional_non_callable_fails() -> None:
    with pytest.raises(TypeError, match="keyword arguments"):
        idempotent(5)  # type: ignore[call-overload]


def test_both_forms_keep_the_view_metadata() -> None:
    assert idempotent(view).__name__ == "view"
    assert idempotent(ttl=timedelta(hours=1))(view).__name__ == "view"


def test_streaming_responses_are_refused() -> None:
    from django.http import StreamingHttpResponse

    with pytest.raises(TypeError, match="non-streaming"):
        require_plain(StreamingHttpResponse(iter([b"a"])))


@pytest.mark.django_db
def test_inside_an_outer_atomic_block_the_protocol_still_holds() -> None:
    """E.g. Django's TestCase: the claim joins the outer transaction."""
    client = Client(raise_request_exception=False)
    key = new_key()
    with transaction.atomic():
        first = post(client, "/charges/", key)
        replay = post(client, "/charges/", key)
        failed_key = new_key()
        assert post(client, "/charges/", failed_key, {"status": 500}).status_code == 500
        assert charges(failed_key) == 0
        assert not IdempotencyEntry.objects.filter(key=failed_key).exists()
    assert first.status_code == 201
    assert replay.content == first.content
    assert charges(key) == 1


@pytest.mark.django_db
def test_request_idempotency_is_set_on_the_request() -> None:
    seen: dict[str, Any] = {}

    @idempotent
    def spy(request: HttpRequest) -> HttpResponse:
        context = request.idempotency  # type: ignore[attr-defined]
        seen.update(key=context.key, tenant=context.tenant, replayed=context.replayed)
        return HttpResponse(json.dumps(seen), status=201)

    request = RequestFactory().post(
        "/x/", "{}", content_type="application/json", headers={"Idempotency-Key": "k-1"}
    )
    spy(request)
    assert seen == {"key": "k-1", "tenant": "", "replayed": False}
    replay_request = RequestFactory().post(
        "/x/", "{}", content_type="application/json", headers={"Idempotency-Key": "k-1"}
    )
    spy(replay_request)
    assert replay_request.idempotency.replayed is True  # type: ignore[attr-defined]


def test_non_atomic_requests_stacks_on_top() -> None:
    from django.test import override_settings

    protected = transaction.non_atomic_requests(using="other")(idempotent(view))
    marker = protected._non_atomic_requests  # type: ignore[attr-defined]
    assert "default" in marker
    assert "other" in marker
    with override_settings(IDEMPOTENCY_DATABASE="payments"):
        assert set(marker) == {"payments", "other"}


def test_non_atomic_requests_below_is_kept() -> None:
    inner = transaction.non_atomic_requests(using="other")(view)
    marker = idempotent(inner)._non_atomic_requests  # type: ignore[attr-defined]
    assert set(marker) == {"default", "other"}


@pytest.mark.django_db
def test_item13_key_extractor_returning_a_non_str_answers_400() -> None:
    # The extractor reads the client's body: a numeric id is the client's doing.
    protected = idempotent(key=lambda request: 42)(view)  # type: ignore[arg-type,return-value]
    request = RequestFactory().post("/x/", "{}", content_type="application/json")
    response = protected(request)
    assert response.status_code == 400
    assert json.loads(response.content)["type"].endswith("key-malformed")


@pytest.mark.django_db
@pytest.mark.parametrize(("tenant", "error"), [(7, TypeError), ("t" * 256, ValueError)])
def test_tenant_resolver_must_return_a_short_str(tenant: Any, error: type[Exception]) -> None:
    protected = idempotent(tenant=lambda request: tenant)(view)
    request = RequestFactory().post(
        "/x/", "{}", content_type="application/json", headers={"Idempotency-Key": "k"}
    )
    with pytest.raises(error, match="tenant"):
        protected(request)
    assert not IdempotencyEntry.objects.exists()


@pytest.mark.django_db
def test_missing_key_message_with_an_extractor_does_not_name_the_header() -> None:
    protected = idempotent(key=lambda request: None)(view)
    response = protected(RequestFactory().post("/x/", "{}", content_type="application/json"))
    assert response.status_code == 400
    assert b"Idempotency-Key" not in response.content


# --- request.idempotency on a request the protection lets through ---------------------------------


def _context_of(request: HttpRequest) -> HttpResponse:
    context = request.idempotency  # type: ignore[attr-defined]
    return HttpResponse(json.dumps({"key": context.key, "tenant": context.tenant}))


def test_a_safe_request_gets_a_context_without_a_key_and_its_tenant() -> None:
    view = idempotent(tenant=lambda request: "acme")(_context_of)
    answer = view(RequestFactory().get("/", HTTP_IDEMPOTENCY_KEY="ignored"))
    assert json.loads(answer.content) == {"key": None, "tenant": "acme"}


def test_a_tenant_resolver_failing_on_a_let_through_request_leaves_the_tenant_empty() -> None:
    def broken(request: HttpRequest) -> str:
        raise LookupError("no account on an anonymous GET")

    view = idempotent(tenant=broken)(_context_of)
    assert json.loads(view(RequestFactory().get("/")).content) == {"key": None, "tenant": ""}


def test_two_protections_let_a_request_through_with_the_outer_ones_context() -> None:
    inner = idempotent(tenant=lambda request: "inner")(_context_of)
    outer = idempotent(tenant=lambda request: "outer")(inner)
    assert json.loads(outer(RequestFactory().get("/")).content)["tenant"] == "outer"


def test_derive_without_a_key_says_why_there_is_none() -> None:
    from django.core.exceptions import ImproperlyConfigured

    def derives(request: HttpRequest) -> HttpResponse:
        return HttpResponse(request.idempotency.derive("stripe"))  # type: ignore[attr-defined]

    with pytest.raises(ImproperlyConfigured, match=r"derive\(\) needs an idempotency key"):
        idempotent(derives)(RequestFactory().get("/"))
