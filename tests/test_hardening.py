"""Issue 9: each defect an adversarial review of 0.1.0 reproduced, as a test named for it.

Views and URLs live here (``pytest.mark.urls``) so each case shows its own
decorator order.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ImproperlyConfigured
from django.db import connection, transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.test import Client, override_settings
from django.urls import path
from django.utils import timezone
from django.utils.decorators import method_decorator
from django.views import View
from rest_framework.authentication import TokenAuthentication
from rest_framework.authtoken.models import Token
from rest_framework.decorators import api_view, authentication_classes, permission_classes
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from idempotency_django import idempotent, purge
from idempotency_django._operations.checks import check_settings
from idempotency_django.models import IdempotencyEntry
from idempotency_django.rest_framework import IdempotentMixin
from tests.helpers import new_key, unreachable_database
from tests.testapp.models import Charge

# ruff: noqa: RUF012  (DRF's class attributes are lists by convention)
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.test_hardening")]
User = get_user_model()


def _charge(request: HttpRequest, status: int = 201) -> HttpResponse:
    user = getattr(request, "user", None)
    owner = user.get_username() if user is not None and user.is_authenticated else "anonymous"
    made = Charge.objects.create(reference=request.idempotency.key or "", amount=1)  # type: ignore[attr-defined]
    return JsonResponse({"id": made.pk, "owner": owner}, status=status)


def token_auth(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """A project's own authentication decorator: sets request.user from a token."""

    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        found = TokenAuthentication().authenticate(request)  # type: ignore[arg-type]
        if found is not None:
            request.user = found[0]
        return view(request, *args, **kwargs)

    return wrapper


@idempotent
@token_auth
def misplaced(request: HttpRequest) -> HttpResponse:
    return _charge(request)


@api_view(["POST"])
@authentication_classes([TokenAuthentication])
@permission_classes([IsAuthenticated])
@idempotent
def drf_function(request: Any) -> Response:
    made = Charge.objects.create(reference=request.idempotency.key, amount=1)
    return Response({"id": made.pk, "owner": request.user.get_username()}, status=201)


@method_decorator(idempotent, name="dispatch")
class DecoratedAPIView(APIView):
    authentication_classes = [TokenAuthentication]
    permission_classes = [IsAuthenticated]

    def post(self, request: Any) -> Response:
        made = Charge.objects.create(reference=request.idempotency.key, amount=1)
        return Response({"id": made.pk, "owner": request.user.get_username()}, status=201)


@idempotent
@login_required
def login_first(request: HttpRequest) -> HttpResponse:
    return _charge(request)


@idempotent
def refuses(request: HttpRequest) -> HttpResponse:
    Charge.objects.create(reference=request.idempotency.key or "", amount=1)  # type: ignore[attr-defined]
    return HttpResponse(status=int(request.headers.get("X-Status", "403")))


@idempotent
def marks_rollback(request: HttpRequest) -> HttpResponse:
    Charge.objects.create(reference=request.idempotency.key or "", amount=1)  # type: ignore[attr-defined]
    transaction.set_rollback(True)
    return JsonResponse({"declined": True}, status=402)


@idempotent
def durable(request: HttpRequest) -> HttpResponse:
    with transaction.atomic(durable=True):
        return _charge(request)


@idempotent
def declined(request: HttpRequest) -> HttpResponse:
    Charge.objects.create(reference=request.idempotency.key or "", amount=1)  # type: ignore[attr-defined]
    return HttpResponse(b"no", status=402, reason="Card Declined")


class IntegrityMapped(IdempotentMixin, APIView):
    """A handler whose IntegrityError the view's own exception handling maps to 400."""

    authentication_classes: list[Any] = []
    permission_classes: list[Any] = []

    def post(self, request: Any) -> Response:
        Charge.objects.create(reference="kept?", amount=1)
        Charge.objects.create(reference=None, amount=1)  # type: ignore[misc]  # NOT NULL
        return Response(status=201)

    def handle_exception(self, exc: Exception) -> Response:
        from django.db import IntegrityError

        if isinstance(exc, IntegrityError):
            return Response({"detail": "duplicate"}, status=400)
        return super().handle_exception(exc)


class TokenMixinView(IdempotentMixin, APIView):
    authentication_classes = [TokenAuthentication]
    permission_classes = [IsAuthenticated]

    def post(self, request: Any) -> Response:
        return Response(status=201)


@method_decorator(transaction.non_atomic_requests(using="other"), name="dispatch")
class MixinWithOwnMarker(IdempotentMixin, APIView):
    def post(self, request: Any) -> Response:
        return Response(status=201)


@method_decorator(transaction.non_atomic_requests(using="other"), name="dispatch")
@method_decorator(idempotent, name="dispatch")
class StackedView(View):
    def post(self, request: HttpRequest) -> HttpResponse:
        return _charge(request)


urlpatterns = [
    path("misplaced/", misplaced),
    path("drf-function/", drf_function),
    path("decorated-apiview/", DecoratedAPIView.as_view()),
    path("login-first/", login_first),
    path("refuses/", refuses),
    path("marks-rollback/", marks_rollback),
    path("durable/", durable),
    path("declined/", declined),
    path("integrity/", IntegrityMapped.as_view()),
    path("token-mixin/", TokenMixinView.as_view()),
    path("accounts/login/", lambda request: HttpResponse("login")),
]


def token_client(user: Any, **extra: Any) -> Client:
    token, _ = Token.objects.get_or_create(user=user)
    return Client(HTTP_AUTHORIZATION=f"Token {token.key}", **extra)


def send(client: Client, url: str, key: str, body: Any = None, **headers: str) -> Any:
    payload = json.dumps(body if body is not None else {"amount": 100})
    headers = {"Idempotency-Key": key, **headers}
    return client.post(url, payload, content_type="application/json", headers=headers)


@pytest.fixture
def alice() -> Any:
    return User.objects.create_user("alice", password="pw")


@pytest.fixture
def bob() -> Any:
    return User.objects.create_user("bob", password="pw")


# -- 1. tenant resolved before authentication ----------------------------------------------


def test_item1_view_that_authenticates_itself_fails_loudly_and_never_leaks(
    alice: Any, bob: Any
) -> None:
    key = new_key()
    with pytest.raises(ImproperlyConfigured, match="tenant changed"):
        send(token_client(alice), "/misplaced/", key)
    with pytest.raises(ImproperlyConfigured):
        send(token_client(bob), "/misplaced/", key)
    assert not IdempotencyEntry.objects.exists()
    assert not Charge.objects.exists()


def test_item1_method_decorator_on_an_apiview_fails_loudly(alice: Any) -> None:
    with pytest.raises(ImproperlyConfigured, match="IdempotentMixin"):
        send(token_client(alice), "/decorated-apiview/", new_key())
    assert not IdempotencyEntry.objects.exists()
    anonymous = send(Client(raise_request_exception=False), "/decorated-apiview/", new_key())
    assert anonymous.status_code == 401
    assert not IdempotencyEntry.objects.exists()


def test_item1_api_view_over_idempotent_works_per_user(alice: Any, bob: Any) -> None:
    key = new_key()
    first = send(token_client(alice), "/drf-function/", key)
    again = send(token_client(alice), "/drf-function/", key)
    bobs = send(token_client(bob), "/drf-function/", key)
    assert (first.status_code, again.status_code, bobs.status_code) == (201, 201, 201)
    assert again.content == first.content
    assert again["Idempotent-Replayed"] == "true"
    assert json.loads(bobs.content)["owner"] == "bob"
    assert "Idempotent-Replayed" not in bobs
    assert Charge.objects.count() == 2


# -- 2. one clock: the database's --------------------------------------------------------


@contextmanager
def app_clock_offsets() -> Iterator[Callable[[float], None]]:
    """Each thread its own app-server clock: ``set_offset(seconds)`` moves the calling one's."""
    real = timezone.now
    local = threading.local()

    def skewed() -> datetime:
        return real() + timedelta(seconds=getattr(local, "offset", 0.0))

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(timezone, "now", skewed)
        yield lambda seconds: setattr(local, "offset", seconds)


def _as_server(offset: float, work: Callable[[], Any], set_offset: Callable[[float], None]) -> Any:
    result: list[Any] = []

    def run() -> None:
        set_offset(offset)
        try:
            result.append(work())
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    return result[0]


@override_settings(IDEMPOTENCY_TTL=60, IDEMPOTENCY_LEASE=10)
def test_item2_servers_with_skewed_clocks_never_run_a_key_twice() -> None:
    key = new_key()
    with app_clock_offsets() as set_offset:
        first = _as_server(
            -45, lambda: send(Client(), "/refuses/", key, **{"X-Status": "201"}), set_offset
        )
        ahead = _as_server(
            45, lambda: send(Client(), "/refuses/", key, **{"X-Status": "201"}), set_offset
        )
        later = _as_server(
            3600, lambda: send(Client(), "/refuses/", key, **{"X-Status": "201"}), set_offset
        )
    assert first.status_code == 201
    assert ahead["Idempotent-Replayed"] == later["Idempotent-Replayed"] == "true"
    assert Charge.objects.count() == 1


@override_settings(IDEMPOTENCY_TTL=60, IDEMPOTENCY_LEASE=10)
def test_item2_a_purge_host_ahead_deletes_nothing_live() -> None:
    send(Client(), "/refuses/", new_key(), **{"X-Status": "201"})
    with app_clock_offsets() as set_offset:
        set_offset(7200)
        assert purge.purge().as_dict() == {"expired": 0, "abandoned": 0}
    assert IdempotencyEntry.objects.count() == 1


@override_settings(
    IDEMPOTENCY_TTL=60,
    IDEMPOTENCY_CACHE="local",
    CACHES={
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "local": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "i9"},
    },
)
def test_item2_a_server_behind_never_caches_past_the_entry() -> None:
    import time

    from django.core.cache import caches

    from idempotency_django._storage.cache import cache_key

    key = new_key()
    local = caches["local"]
    with app_clock_offsets() as set_offset:
        _as_server(0, lambda: send(Client(), "/refuses/", key, **{"X-Status": "201"}), set_offset)
        local.clear()  # evicted: the next replay comes from the database and refills it
        behind = _as_server(
            -3600, lambda: send(Client(), "/refuses/", key, **{"X-Status": "201"}), set_offset
        )
    assert behind["Idempotent-Replayed"] == "true"
    expiry = local._expire_info[local.make_and_validate_key(cache_key("default", "", key))]  # type: ignore[attr-defined]
    assert expiry - time.time() <= 60


# -- 3. USE_TZ = False, a SQLite TIME_ZONE, AUTOCOMMIT = False -------------------------------


@override_settings(USE_TZ=False)
def test_item3_use_tz_false_replays_refuses_and_takes_over() -> None:
    key = new_key()
    first = send(Client(), "/refuses/", key, **{"X-Status": "201"})
    again = send(Client(), "/refuses/", key, **{"X-Status": "201"})
    other = send(Client(), "/refuses/", key, {"amount": 5}, **{"X-Status": "201"})
    assert (first.status_code, again["Idempotent-Replayed"], other.status_code) == (
        201,
        "true",
        422,
    )
    stuck = new_key()
    _crashed_claim(stuck, lease_seconds=0.001)
    time.sleep(0.01)  # past the lease: on MariaDB the retry can reach its claim within 1 ms
    assert send(Client(), "/refuses/", stuck, **{"X-Status": "201"}).status_code == 201


def _crashed_claim(key: str, lease_seconds: float) -> Any:
    from django.test import RequestFactory

    from idempotency_django._protocol.fingerprint import keyed, request_fingerprint
    from idempotency_django._storage.store import lease
    from idempotency_django._storage.store.sql import Claim, Target

    request = RequestFactory().post("/refuses/", json.dumps({"amount": 100}), "application/json")
    target = Target(
        "default",
        "",
        key,
        keyed(request_fingerprint(request)).current,
        timedelta(seconds=lease_seconds),
        timedelta(hours=1),
    )
    found = lease.claim(target, bounded=False)
    assert isinstance(found, Claim)
    return found


def test_item3_a_live_lease_claim_is_honoured_whatever_the_zones() -> None:
    key = new_key()
    _crashed_claim(key, lease_seconds=60)
    with override_settings(TIME_ZONE="Asia/Tokyo"):
        assert send(Client(), "/refuses/", key, **{"X-Status": "201"}).status_code == 409


def test_item3_autocommit_false_is_a_system_check_error() -> None:
    settings_dict = connection.settings_dict
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(settings_dict, "AUTOCOMMIT", False)
        ids = [message.id for message in check_settings()]
    assert "idempotency_django.E015" in ids


@pytest.mark.parametrize(
    ("settings", "check_id"),
    [
        ({"IDEMPOTENCY_PROTOCOL": "optimistic"}, "idempotency_django.E012"),
        ({"IDEMPOTENCY_WAIT": -1}, "idempotency_django.E014"),
        ({"IDEMPOTENCY_WAIT": "5s"}, "idempotency_django.E014"),
        ({"IDEMPOTENCY_IDLE_TIMEOUT": 0}, "idempotency_django.E016"),
    ],
)
def test_new_settings_are_checked(settings: dict[str, Any], check_id: str) -> None:
    with override_settings(**settings):
        assert check_id in [message.id for message in check_settings()]


def test_lock_protocol_on_sqlite_is_a_system_check_error() -> None:
    with override_settings(IDEMPOTENCY_PROTOCOL="lock"):
        ids = [message.id for message in check_settings()]
    expected = connection.vendor != "postgresql"
    assert ("idempotency_django.E013" in ids) is expected


def test_tenant_resolver_may_be_a_callable() -> None:
    with override_settings(IDEMPOTENCY_TENANT_RESOLVER=lambda request: "acme"):
        assert check_settings() == []
        send(Client(), "/refuses/", new_key(), **{"X-Status": "201"})
    assert IdempotencyEntry.objects.get().tenant == "acme"


# -- 5. authentication and permission refusals are never stored -----------------------------


def test_item5_login_redirect_is_not_stored(alice: Any) -> None:
    key = new_key()
    refused = send(Client(), "/login-first/", key)
    assert refused.status_code == 302
    assert not IdempotencyEntry.objects.exists()
    client = Client()
    client.force_login(alice)
    assert send(client, "/login-first/", key).status_code == 201
    assert Charge.objects.count() == 1


@pytest.mark.parametrize("status", ["401", "403"])
def test_item5_401_and_403_are_not_stored(status: str) -> None:
    key = new_key()
    assert send(Client(), "/refuses/", key, **{"X-Status": status}).status_code == int(status)
    assert not IdempotencyEntry.objects.exists()
    assert not Charge.objects.exists()
    assert send(Client(), "/refuses/", key, **{"X-Status": "201"}).status_code == 201


# -- 6. a partitioned worker's transaction is bounded --------------------------------------


@pytest.mark.requires_postgres
@override_settings(IDEMPOTENCY_IDLE_TIMEOUT=7)
def test_item6_our_transactions_are_ended_by_postgres_when_left_idle() -> None:
    seen: dict[str, str] = {}

    @idempotent
    def probe(request: HttpRequest) -> HttpResponse:
        with connection.cursor() as cursor:
            cursor.execute("SHOW idle_in_transaction_session_timeout")
            seen["timeout"] = cursor.fetchone()[0]
        return HttpResponse(status=201)

    from django.test import RequestFactory

    for protocol in ("lock", "lease"):
        request = RequestFactory().post(
            "/p/", "{}", "application/json", headers={"Idempotency-Key": new_key()}
        )
        with override_settings(IDEMPOTENCY_PROTOCOL=protocol):
            assert probe(request).status_code == 201
        assert seen.pop("timeout") == "7s", protocol


# -- 7. rollback marks, durable blocks, a handler's IntegrityError -------------------------


def test_item7_a_view_that_marks_its_transaction_for_rollback_is_transient() -> None:
    key = new_key()
    first = send(Client(), "/marks-rollback/", key)
    assert first.status_code == 402
    assert not IdempotencyEntry.objects.exists()
    assert not Charge.objects.exists()
    assert "Idempotent-Replayed" not in send(Client(), "/marks-rollback/", key)


def test_item7_durable_atomic_gets_a_clear_error() -> None:
    with pytest.raises(ImproperlyConfigured, match="durable"):
        send(Client(), "/durable/", new_key())
    assert not IdempotencyEntry.objects.exists()


def test_item7_a_handlers_integrity_error_mapped_to_400_is_stored() -> None:
    key = new_key()
    first = send(Client(), "/integrity/", key)
    again = send(Client(), "/integrity/", key)
    assert (first.status_code, again.status_code) == (400, 400)
    assert again["Idempotent-Replayed"] == "true"
    assert IdempotencyEntry.objects.get().status == IdempotencyEntry.Status.FAILED_FINAL
    assert not Charge.objects.exists()  # the handler's writes rolled back to its savepoint


# -- 8. _non_atomic_requests merged, not overwritten ---------------------------------------


def test_item8_markers_are_merged() -> None:
    marker = MixinWithOwnMarker.as_view()._non_atomic_requests
    assert "default" in marker
    assert "other" in marker
    # Two method_decorators on dispatch: Django's method_decorator copies the inner
    # function's attributes last, so the entries' alias survives (the outer alias is
    # Django's to merge; documented). On PostgreSQL a duplicate gets 409 at once
    # even inside an ATOMIC_REQUESTS block: the advisory lock never queues.
    assert "default" in StackedView.as_view()._non_atomic_requests  # type: ignore[attr-defined]


# -- 9. a custom reason phrase is replayed -------------------------------------------------


def test_item9_reason_phrase_is_replayed() -> None:
    key = new_key()
    first = send(Client(), "/declined/", key)
    again = send(Client(), "/declined/", key)
    assert first.reason_phrase == again.reason_phrase == "Card Declined"
    assert again["Idempotent-Replayed"] == "true"


# -- 11. a database outage while DRF authenticates is a 503 --------------------------------


def test_item11_database_down_during_token_authentication_is_503(alice: Any) -> None:
    client = token_client(alice, raise_request_exception=False)
    with unreachable_database():
        response = send(client, "/token-mixin/", new_key())
    assert response.status_code == 503
    assert response["Content-Type"] == "application/problem+json"
