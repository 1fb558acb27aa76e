"""Every kind of view twice: as ``IdempotencyMiddleware`` meets it (``/switch/...``), and
as a bare ``@idempotent`` (or the view's own protection) answers it (``/bare/...``).

``tests/test_switch_differential.py`` sends both the same requests and compares every
outcome. Each view creates one ``Charge`` per run and answers with what it created.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from django.http import (
    FileResponse,
    HttpRequest,
    HttpResponse,
    JsonResponse,
    StreamingHttpResponse,
)
from django.urls import URLPattern, URLResolver, path
from django.utils.decorators import method_decorator
from django.views import View
from rest_framework.authentication import TokenAuthentication
from rest_framework.decorators import api_view, authentication_classes, permission_classes
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from idempotency_django import idempotent
from idempotency_django.calls import idempotent_call
from idempotency_django.rest_framework import IdempotentMixin
from tests.testapp import form_views, switch_views
from tests.testapp.models import Charge

View_ = Callable[..., Any]


def _amount(request: HttpRequest) -> int:
    try:
        amount = json.loads(request.body)["amount"]
    except (ValueError, KeyError, TypeError):
        amount = None
    return amount if isinstance(amount, int) else 0


def _created(request: HttpRequest, reference: str, **extra: Any) -> JsonResponse:
    charge = Charge.objects.create(reference=reference, amount=_amount(request))
    return JsonResponse({"id": charge.pk, "amount": charge.amount, **extra}, status=201)


class ClassCharge(View):
    """A class-based view with nothing of ours on it."""

    def post(self, request: HttpRequest) -> HttpResponse:
        return _created(request, "class")


class MethodDecorated(View):
    """A class view protecting its handler itself, ``@method_decorator(idempotent)``."""

    @method_decorator(idempotent)
    def post(self, request: HttpRequest) -> HttpResponse:
        return _created(request, "method-decorated")


# --- an inner protection with options of its own, hidden from the URL's view ------------------


def account(request: HttpRequest) -> str:
    """The key space: the account the client names (an API gateway's header)."""
    return request.headers.get("X-Account", "")


def _token_order(request: HttpRequest) -> HttpResponse:
    # The token is the account's secret: redacted from what is stored and replayed.
    return _created(request, f"order-{account(request)}", token=f"secret-{account(request)}")


_inner = idempotent(tenant=account, redact=["token"])(_token_order)


def logged(view: View_) -> View_:
    """A decorator written without ``functools.wraps``: it hides the view's marks."""

    def call(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        return view(request, *args, **kwargs)  # type: ignore[no-any-return]

    return call


hidden_order = logged(_inner)
# Protecting PUT only: a POST passes through it, unprotected, as under it alone.
hidden_put_only = logged(idempotent(methods=["PUT"])(_token_order))


def order_inside(request: HttpRequest) -> HttpResponse:
    """``@idempotent`` applied inside the view, to the function it hands its request; the
    view's own ``except Exception`` must not catch the switch's withdrawal."""
    try:
        return idempotent(tenant=account, redact=["token"])(_token_order)(request)
    except Exception:
        return JsonResponse({"error": "the order failed"}, status=500)


async def _async_token_order(request: HttpRequest) -> HttpResponse:
    charge = await Charge.objects.acreate(reference=f"order-{account(request)}", amount=1)
    body = {"id": charge.pk, "amount": _amount(request), "token": f"secret-{account(request)}"}
    return JsonResponse(body, status=201)


def logged_async(view: Callable[..., Any]) -> Callable[..., Any]:
    """An ``async`` decorator without ``functools.wraps``."""

    async def call(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        return await view(request, *args, **kwargs)  # type: ignore[no-any-return]

    return call


hidden_async_order = logged_async(idempotent(tenant=account, redact=["token"])(_async_token_order))


def inner_call(request: HttpRequest) -> HttpResponse:
    """A view whose charge is an ``idempotent_call`` of its own (its own scope and key)."""
    key = request.headers.get("Idempotency-Key")
    if key is None:
        return _created(request, "inner-call")
    with idempotent_call(f"{key}-{_amount(request)}", scope="differential") as call:
        if not call.replayed:
            call.result = Charge.objects.create(reference="inner-call", amount=1).reference
    return JsonResponse({"inner": call.result, "replayed": call.replayed}, status=201)


# --- streaming answers -------------------------------------------------------------------------


def _chunks(pk: int) -> Iterator[bytes]:
    yield b"charge "
    yield str(pk).encode()


def streaming(request: HttpRequest) -> HttpResponse:
    charge = Charge.objects.create(reference="streaming", amount=_amount(request))
    return StreamingHttpResponse(_chunks(charge.pk), status=201)  # type: ignore[return-value]


def file_answer(request: HttpRequest) -> HttpResponse:
    import io

    charge = Charge.objects.create(reference="file", amount=_amount(request))
    return FileResponse(io.BytesIO(f"charge {charge.pk}".encode()), status=201)  # type: ignore[return-value]


# --- an exception a project's middleware answers -----------------------------------------------


class DomainError(Exception):
    """A project's own error, answered 400 by its middleware's ``process_exception``."""


def raising(request: HttpRequest) -> HttpResponse:
    Charge.objects.create(reference="raising", amount=_amount(request))
    raise DomainError("the amount is over the account's limit")


class DomainErrorMiddleware:
    """A project's middleware turning a domain error into a 400."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, DomainError):
            return JsonResponse({"error": str(exception)}, status=400)
        return None


# --- DRF and adrf: the class with IdempotentMixin in front, as the switch protects it ---------


class MixinDrfCharge(IdempotentMixin, switch_views.DrfCharge):
    pass


class MixinAdrfCharge(IdempotentMixin, switch_views.AdrfCharge):  # type: ignore[misc]
    pass


class MixinViewSet(IdempotentMixin, switch_views.ChargeViewSet):
    pass


@api_view(["POST"])
@authentication_classes([TokenAuthentication])
@permission_classes([IsAuthenticated])
@idempotent
def drf_function_protected(request: Request) -> Response:
    """``@api_view`` above ``@idempotent``: the documented form of a bare DRF function."""
    return switch_views._drf_create(request)


# Each kind: (the view as the switch meets it, the view as a bare protection answers).
KINDS: dict[str, tuple[View_, View_]] = {
    "function": (switch_views.charge, idempotent(switch_views.charge)),
    "async": (switch_views.async_charge, idempotent(switch_views.async_charge)),
    "class": (ClassCharge.as_view(), idempotent(ClassCharge.as_view())),
    "method-decorator": (MethodDecorated.as_view(), MethodDecorated.as_view()),
    "hidden-by-a-decorator": (hidden_order, hidden_order),
    "protected-inside": (order_inside, order_inside),
    "hidden-async": (hidden_async_order, hidden_async_order),
    "hidden-put-only": (hidden_put_only, hidden_put_only),
    "delegating": (form_views.delegating_charge, form_views.delegating_charge),
    "inner-call": (inner_call, idempotent(inner_call)),
    "streaming": (streaming, idempotent(streaming)),
    "file": (file_answer, idempotent(file_answer)),
    "raising": (raising, idempotent(raising)),
    "plain-form": (form_views.plain_charge, idempotent(form_views.plain_charge)),
    "form-mixin": (form_views.ChargeCreate.as_view(), form_views.ChargeCreate.as_view()),
    "exempt": (switch_views.ExemptChargeView.as_view(), switch_views.ExemptChargeView.as_view()),
    "drf": (switch_views.DrfCharge.as_view(), MixinDrfCharge.as_view()),
    "adrf": (switch_views.AdrfCharge.as_view(), MixinAdrfCharge.as_view()),
    "drf-function": (switch_views.drf_function, drf_function_protected),
    "viewset": (
        switch_views.ChargeViewSet.as_view({"post": "create"}),
        MixinViewSet.as_view({"post": "create"}),
    ),
}

urlpatterns: list[URLPattern | URLResolver] = [
    *(path(f"switch/{kind}/", views[0]) for kind, views in KINDS.items()),
    *(path(f"bare/{kind}/", views[1]) for kind, views in KINDS.items()),
    # Ninja: an operation (/switch/ninja/charges) beside one protected by Ninja's
    # @idempotent (/switch/ninja/protected/charges), the same function body.
    path("switch/ninja/", switch_views.api.urls),
    *form_views.urlpatterns,  # the admin (/forms-admin/), GraphQL (/graphql/, /graphene/)
]
