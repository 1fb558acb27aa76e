"""``idempotency_django.ninja.idempotent`` on Django Ninja operations, sync and async.

Runs on SQLite and, in the PostgreSQL pass, on PostgreSQL (the race too).
The operations are in ``tests/testapp/ninja_api.py`` (API-key auth by default).
"""

from __future__ import annotations

import json
import warnings
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client, RequestFactory
from django.utils import timezone
from ninja import NinjaAPI

from idempotency_django.exceptions import PROBLEM_BASE
from idempotency_django.models import IdempotencyEntry
from idempotency_django.ninja import idempotent, principal_tenant
from tests.helpers import charges, new_key, problem, race

pytestmark = [pytest.mark.faces, pytest.mark.versions, pytest.mark.django_db(transaction=True)]
Status = IdempotencyEntry.Status

SYNC_AND_ASYNC = pytest.mark.parametrize("path", ["/ninja/charges", "/ninja/async/charges"])
BEARER = pytest.mark.parametrize("path", ["/ninja/bearer/charges", "/ninja/async/bearer/charges"])


def send(
    path: str,
    key: str | None,
    body: dict[str, Any] | None = None,
    *,
    api_key: str | None = "key-alice",
    token: str | None = None,
    headers: dict[str, str] | None = None,
) -> Any:
    headers = dict(headers or {})
    if key is not None:
        headers["Idempotency-Key"] = key
    if api_key is not None:
        headers["X-API-Key"] = api_key
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    payload = json.dumps(body if body is not None else {"amount": 100})
    client = Client(raise_request_exception=False)
    return client.post(path, payload, content_type="application/json", headers=headers)


def assert_replay(first: Any, retry: Any) -> None:
    assert retry["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first
    assert (retry.status_code, retry.content) == (first.status_code, first.content)
    assert retry["Content-Type"] == first["Content-Type"]


@SYNC_AND_ASYNC
def test_retry_is_a_byte_identical_replay(path: str) -> None:
    key = new_key()
    first = send(path, key)
    retry = send(path, key)
    assert first.status_code == 201
    assert json.loads(first.content)["caller"] == "key-alice"
    assert_replay(first, retry)
    assert charges(key) == 1


@pytest.mark.parametrize(
    "path",
    [
        "/ninja/returns/dict",
        "/ninja/returns/schema",
        "/ninja/returns/http-response",
        "/ninja/returns/headers",
        "/ninja/returns/tuple",
    ],
)
def test_whatever_the_operation_returns_the_rendered_answer_is_replayed(path: str) -> None:
    key = new_key()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # Ninja deprecates the tuple form
        first = send(path, key)
        retry = send(path, key)
    assert first.status_code in (200, 201)
    assert_replay(first, retry)
    assert retry.get("Location") == first.get("Location")
    assert charges(key) == 1


def test_headers_set_on_ninjas_response_are_stored_cookies_are_not() -> None:
    key = new_key()
    first = send("/ninja/returns/headers", key)
    retry = send("/ninja/returns/headers", key)
    assert first["Location"].startswith("/charges/")
    assert retry["Location"] == first["Location"]
    assert "receipt" in first.cookies
    assert "receipt" not in retry.cookies  # as for every protected view: never replayed


@SYNC_AND_ASYNC
def test_another_body_with_the_key_is_422(path: str) -> None:
    key = new_key()
    first = send(path, key, {"amount": 100})
    response = send(path, key, {"amount": 101})
    assert response.status_code == 422
    assert problem(response)["type"] == PROBLEM_BASE + "key-reused"
    assert first.content not in response.content
    assert charges(key) == 1


@SYNC_AND_ASYNC
def test_in_flight_duplicate_is_409(path: str) -> None:
    key = new_key()
    send(path, key)
    IdempotencyEntry.objects.filter(key=key).update(
        status=Status.IN_PROGRESS, locked_until=timezone.now() + timedelta(seconds=60)
    )
    response = send(path, key)
    assert response.status_code == 409
    assert int(response["Retry-After"]) >= 1
    assert problem(response)["type"] == PROBLEM_BASE + "in-progress"


@SYNC_AND_ASYNC
def test_two_api_keys_with_one_idempotency_key_never_share_an_answer(path: str) -> None:
    key = new_key()
    alice = send(path, key, api_key="key-alice")
    bob = send(path, key, api_key="key-bob")
    assert "Idempotent-Replayed" not in bob
    assert json.loads(alice.content)["caller"] == "key-alice"
    assert json.loads(bob.content)["caller"] == "key-bob"
    assert charges(key) == 2
    assert_replay(alice, send(path, key, api_key="key-alice"))
    assert_replay(bob, send(path, key, api_key="key-bob"))
    assert charges(key) == 2


@BEARER
def test_two_bearer_tokens_with_one_idempotency_key_never_share_an_answer(path: str) -> None:
    key = new_key()
    carol = send(path, key, api_key=None, token="token-carol")
    dave = send(path, key, api_key=None, token="token-dave")
    assert (carol.status_code, dave.status_code) == (201, 201)
    assert "Idempotent-Replayed" not in dave
    assert charges(key) == 2
    assert_replay(carol, send(path, key, api_key=None, token="token-carol"))
    assert_replay(dave, send(path, key, api_key=None, token="token-dave"))


def test_the_credential_itself_is_never_stored() -> None:
    key = new_key()
    send("/ninja/charges", key, api_key="key-alice")
    tenant = IdempotencyEntry.objects.get(key=key).tenant
    assert "key-alice" not in tenant
    assert tenant == principal_tenant("key-alice") != principal_tenant("key-bob")


@SYNC_AND_ASYNC
def test_401_is_never_stored(path: str) -> None:
    key = new_key()
    refused = send(path, key, api_key="key-mallory")
    assert refused.status_code == 401
    assert not IdempotencyEntry.objects.filter(key=key).exists()
    assert send(path, key).status_code == 201
    assert charges(key) == 1


@SYNC_AND_ASYNC
def test_ninjas_422_for_a_bad_payload_is_never_stored(path: str) -> None:
    key = new_key()
    invalid = send(path, key, {"amount": "lots"})
    assert invalid.status_code == 422
    assert not IdempotencyEntry.objects.filter(key=key).exists()
    assert send(path, key, {"amount": 100}).status_code == 201


@SYNC_AND_ASYNC
def test_missing_key_is_400_problem(path: str) -> None:
    response = send(path, None)
    assert response.status_code == 400
    assert problem(response)["type"] == PROBLEM_BASE + "key-missing"


@SYNC_AND_ASYNC
def test_an_exception_rolls_back_and_frees_the_key(path: str) -> None:
    key = new_key()
    assert send(path, key, {"amount": 1, "fail": True}).status_code == 503
    assert charges(key) == 0
    assert not IdempotencyEntry.objects.filter(key=key).exists()
    assert send(path, key, {"amount": 1}).status_code == 201


@SYNC_AND_ASYNC
def test_a_final_4xx_the_operation_returns_is_stored(path: str) -> None:
    key = new_key()
    declined = send(path, key, {"amount": 1, "status": 402})
    assert declined.status_code == 402
    assert_replay(declined, send(path, key, {"amount": 1, "status": 402}))


def test_unauthenticated_operation_keeps_the_anonymous_scope() -> None:
    key = new_key()
    first = send("/ninja/anonymous/charges", key, api_key=None)
    assert IdempotencyEntry.objects.get(key=key).tenant == ""
    assert_replay(first, send("/ninja/anonymous/charges", key, api_key="key-bob"))


def test_tenant_option_takes_a_callable() -> None:
    key = new_key()
    first = send("/ninja/open/charges", key, api_key=None, headers={"X-Account": "acct-1"})
    other = send("/ninja/open/charges", key, api_key=None, headers={"X-Account": "acct-2"})
    assert "Idempotent-Replayed" not in other
    assert set(IdempotencyEntry.objects.filter(key=key).values_list("tenant", flat=True)) >= {
        "acct-1",
        "acct-2",
    }
    assert_replay(
        first, send("/ninja/open/charges", key, api_key=None, headers={"X-Account": "acct-1"})
    )


@pytest.mark.parametrize("path", ["/ninja/wide/charges", "/ninja/wide/async/charges"])
def test_router_wide_form_protects_every_unsafe_operation(path: str) -> None:
    key = new_key()
    first = send(path, key)
    assert_replay(first, send(path, key))
    assert charges(key) == 1
    assert IdempotencyEntry.objects.get(key=key).expires_at <= timezone.now() + timedelta(
        seconds=601
    )
    assert (
        Client().get("/ninja/wide/charges", headers={"X-API-Key": "key-alice"}).status_code == 200
    )


def _openapi() -> dict[str, Any]:
    response = Client().get("/ninja/openapi.json")
    assert response.status_code == 200
    return dict(response.json())


@pytest.mark.parametrize(
    "path", ["/ninja/charges", "/ninja/async/charges", "/ninja/returns/dict", "/ninja/wide/charges"]
)
def test_openapi_documents_the_header_and_the_problem_answers(path: str) -> None:
    operation = _openapi()["paths"][path]["post"]
    headers = [p for p in operation["parameters"] if p["in"] == "header"]
    assert [(p["name"], p["required"]) for p in headers] == [("Idempotency-Key", True)]
    for status in ("400", "409", "422", "503"):
        schema = operation["responses"][status]["content"]["application/problem+json"]["schema"]
        assert schema["required"] == ["type", "title", "status", "detail"]
    assert "Retry-After" in operation["responses"]["409"]["headers"]
    assert operation["responses"]["201" if "dict" not in path else "200"]


def test_openapi_leaves_safe_operations_alone() -> None:
    operation = _openapi()["paths"]["/ninja/wide/charges"]["get"]
    assert not [p for p in operation["parameters"] if p["in"] == "header"]
    assert "409" not in operation["responses"]


def test_above_the_operation_decorator_is_a_type_error() -> None:
    api = NinjaAPI(urls_namespace="wrong-order")

    def charge(request: Any) -> dict[str, str]:
        return {}

    operation = api.post("/charge")(charge)
    with pytest.raises(TypeError, match="directly under the Ninja operation decorator"):
        idempotent(operation)


def test_wrong_option_is_a_type_error_when_applied() -> None:
    with pytest.raises(TypeError, match="unknown option"):
        idempotent(ttl_seconds=3)  # type: ignore[call-overload]


def test_a_credentials_key_space_survives_a_secret_key_rotation(settings: Any) -> None:
    before = principal_tenant("key-alice")
    settings.SECRET_KEY_FALLBACKS = [settings.SECRET_KEY]
    settings.SECRET_KEY = "a-new-secret-key"
    assert principal_tenant("key-alice") == before


def test_principals_of_each_kind(django_user_model: Any) -> None:
    from rest_framework.authtoken.models import Token

    user = django_user_model.objects.create_user("erin")
    token = Token.objects.create(user=user)
    assert principal_tenant(user) == str(user.pk)
    assert principal_tenant(token) == f"authtoken.token:{token.pk}"
    # The type is part of the tenant (0.3 digested these alike).
    assert principal_tenant(b"key-alice") != principal_tenant("key-alice")
    assert principal_tenant(7) != principal_tenant("7") != principal_tenant(8)


def test_unidentifying_principal_is_refused_loudly() -> None:
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(ImproperlyConfigured, match="tenant="):
        principal_tenant(True)


@pytest.mark.requires_postgres
@pytest.mark.parametrize(
    "path", ["/ninja/charges", "/ninja/async/charges", "/ninja/wide/async/charges"]
)
def test_sixteen_racing_retries_execute_once(path: str) -> None:
    for trial in range(10):
        key = f"ninja-{trial}-{new_key()}"
        body = {"amount": 100, "sleep": 0.01 if trial % 2 else 0}

        def one(_index: int, key: str = key, body: dict[str, Any] = body) -> Any:
            return send(path, key, body)

        responses = race(16, one)
        assert not [r for r in responses if isinstance(r, BaseException)], responses
        originals = [
            r for r in responses if r.status_code == 201 and "Idempotent-Replayed" not in r
        ]
        assert len(originals) == 1, [r.status_code for r in responses]
        for response in responses:
            if response is originals[0] or response.status_code == 409:
                continue
            assert_replay(originals[0], response)
        assert charges(key) == 1


@pytest.mark.requires_postgres
@SYNC_AND_ASYNC
def test_two_callers_racing_one_key_stay_apart(path: str) -> None:
    key = new_key()
    callers = ["key-alice", "key-bob"] * 8
    responses = race(len(callers), lambda i: send(path, key, api_key=callers[i]))
    for caller in ("key-alice", "key-bob"):
        mine = [r for i, r in enumerate(responses) if callers[i] == caller and r.status_code == 201]
        assert {json.loads(r.content)["caller"] for r in mine} == {caller}
    assert charges(key) == 2


def test_router_wide_form_in_ninjas_default_mode_is_a_type_error() -> None:
    from ninja import Router

    router = Router()
    router.add_decorator(idempotent(ttl=60))

    @router.post("/charge")
    def charge(request: Any) -> dict[str, str]:
        return {}

    api = NinjaAPI(urls_namespace="default-mode")
    api.add_router("/", router)
    with pytest.raises(TypeError, match='mode="view"'):
        api.urls  # noqa: B018


def test_a_decorate_view_below_it_still_runs() -> None:
    from django.views.decorators.cache import never_cache
    from ninja.decorators import decorate_view

    api = NinjaAPI(urls_namespace="with-decorate-view")

    @api.post("/charge", auth=None)
    @idempotent
    @decorate_view(never_cache)
    def charge(request: Any) -> dict[str, str]:
        return {"key": request.idempotency.key}

    operation = api._get_bound_routers()[0].path_operations["/charge"].operations[0]
    first: Any = operation.run(RequestFactory().post("/charge", headers={"Idempotency-Key": "k-d"}))
    retry: Any = operation.run(RequestFactory().post("/charge", headers={"Idempotency-Key": "k-d"}))
    assert first.status_code == 200
    assert "no-cache" in first["Cache-Control"]
    assert retry["Idempotent-Replayed"] == "true"
    assert retry.content == first.content


def test_a_positional_argument_that_is_no_function_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="keyword arguments only"):
        idempotent(3600)  # type: ignore[call-overload]


def test_router_wide_options_leave_an_operation_with_its_own_alone() -> None:
    from ninja import Router

    router = Router()
    router.add_decorator(idempotent(ttl=60), mode="view")

    @router.post("/charge", auth=None)
    @idempotent(ttl=3600)
    def charge(request: Any) -> dict[str, str]:
        return {"key": request.idempotency.key}

    api = NinjaAPI(urls_namespace="own-options")
    api.add_router("/", router)
    views: list[Any] = [p.callback for p in api.urls[0] if str(p.pattern) == "charge"]
    [view] = views
    key = new_key()
    first: Any = view(RequestFactory().post("/charge", headers={"Idempotency-Key": key}))
    assert first.status_code == 200
    expires = IdempotencyEntry.objects.get(key=key).expires_at
    assert expires > timezone.now() + timedelta(seconds=3000)


def test_a_streaming_operation_cannot_be_made_idempotent() -> None:
    from django.core.exceptions import ImproperlyConfigured

    streaming = pytest.importorskip("ninja.streaming")
    api = NinjaAPI(urls_namespace="streaming-own")
    with pytest.raises(ImproperlyConfigured, match="a streamed answer can't be stored"):

        @api.post("/numbers", response=streaming.JSONL[int])
        @idempotent
        def numbers(request: Any) -> Any:
            yield 1


def test_router_wide_protection_refuses_a_streaming_operation() -> None:
    from django.core.exceptions import ImproperlyConfigured
    from ninja import Router

    streaming = pytest.importorskip("ninja.streaming")
    router = Router()
    router.add_decorator(idempotent(ttl=60), mode="view")

    @router.post("/numbers", response=streaming.JSONL[int])
    def numbers(request: Any) -> Any:
        yield 1

    api = NinjaAPI(urls_namespace="streaming-wide")
    api.add_router("/", router)
    with pytest.raises(ImproperlyConfigured, match="a streamed answer can't be stored"):
        api.urls  # noqa: B018


def test_a_run_replaced_without_functools_wraps_hides_the_operation_and_says_so() -> None:
    """Another contribution ahead of ours swapped the operation's run for a plain function:
    @idempotent cannot find its operation, and says where it must go."""
    from django.core.exceptions import ImproperlyConfigured

    def charge(request: Any) -> dict[str, str]:
        return {}

    protected = idempotent(charge)

    def plain_run(operation: Any) -> None:
        original = operation.run
        operation.run = lambda request, **kwargs: original(request, **kwargs)

    protected._ninja_contribute_to_operation.insert(0, plain_run)  # type: ignore[attr-defined]
    api = NinjaAPI(urls_namespace="hidden-operation")
    with pytest.raises(ImproperlyConfigured, match="could not find the Ninja operation"):
        api.post("/charge", auth=None)(protected)


def test_called_outside_a_ninja_operation_it_says_so() -> None:
    from django.core.exceptions import ImproperlyConfigured

    @idempotent
    def charge(request: Any) -> dict[str, str]:
        return {}

    request = RequestFactory().post("/charge", headers={"Idempotency-Key": new_key()})
    with pytest.raises(ImproperlyConfigured, match="ran outside a Ninja operation"):
        charge(request)


def test_openapi_documents_no_key_header_for_an_operation_keyed_otherwise() -> None:
    api = NinjaAPI(urls_namespace="keyed-otherwise")

    @api.post("/charge", auth=None)
    @idempotent(key=lambda request: request.headers.get("X-Request-ID"))
    def charge(request: Any) -> dict[str, str]:
        return {}

    operation = api.get_openapi_schema(path_prefix="")["paths"]["/charge"]["post"]
    assert operation["parameters"] == []  # no Idempotency-Key header: the key is the request's
    assert "Retry-After" in operation["responses"][409]["headers"]
