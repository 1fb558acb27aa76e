"""DRF views the tests protect with ``IdempotentMixin``; the JSON body steers what they do.

Every execution that commits leaves one ``Charge`` whose reference is the key, so
``tests.helpers.charges(key)`` counts committed executions.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from rest_framework import exceptions, generics, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.permissions import BasePermission, IsAuthenticated
from rest_framework.renderers import BaseRenderer, BrowsableAPIRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import BaseThrottle
from rest_framework.views import APIView, exception_handler

from idempotency_django.rest_framework import IdempotentMixin
from tests.testapp.models import Charge

if TYPE_CHECKING:
    ChargeSerializerBase = serializers.ModelSerializer[Charge]
    ChargeViewSetBase = viewsets.ModelViewSet[Charge]
    CreateViewBase = generics.CreateAPIView[Charge]
else:
    ChargeSerializerBase = serializers.ModelSerializer
    ChargeViewSetBase = viewsets.ModelViewSet
    CreateViewBase = generics.CreateAPIView


class ServiceUnavailable(exceptions.APIException):
    status_code = 503
    default_detail = "The payment provider is down."
    default_code = "provider_down"


class Conflict(exceptions.APIException):
    status_code = 409
    default_detail = "Conflicts with the current state."
    default_code = "conflict"


_FAILURES: dict[str, Exception] = {
    "runtime": RuntimeError("the view failed after writing"),
    "api500": exceptions.APIException(),
    "unavailable": ServiceUnavailable(),
    "conflict": Conflict(),
    "notfound": exceptions.NotFound(),
    "denied": exceptions.PermissionDenied(),
    "django-denied": DjangoPermissionDenied(),
    "unauthenticated": exceptions.NotAuthenticated(),
    "throttled": exceptions.Throttled(wait=3),
}


def reference(request: Request) -> str:
    context = getattr(request, "idempotency", None)
    return context.key if context is not None and context.key else ""


def steer(request: Request) -> None:
    """Sleep or fail as the body asks, after the view has written."""
    data = request.data if isinstance(request.data, dict) else {}
    if data.get("sleep"):
        time.sleep(float(data["sleep"]))
    if data.get("fail"):
        raise _FAILURES[str(data["fail"])]


class ChargeSerializer(ChargeSerializerBase):
    amount = serializers.IntegerField(min_value=0)

    class Meta:
        model = Charge
        fields = ("id", "reference", "amount")
        read_only_fields = ("reference",)


class HeaderPermission(BasePermission):
    """Refuses with 403 when ``X-Deny: yes``; objects when ``X-Deny-Object: yes``."""

    def has_permission(self, request: Request, view: Any) -> bool:
        return request.headers.get("X-Deny") != "yes"

    def has_object_permission(self, request: Request, view: Any, obj: Any) -> bool:
        return request.headers.get("X-Deny-Object") != "yes"


class HeaderThrottle(BaseThrottle):
    """Throttles with 429 when ``X-Throttle: yes``."""

    def allow_request(self, request: Request, view: Any) -> bool:
        return request.headers.get("X-Throttle") != "yes"

    def wait(self) -> float:
        return 7


class TextRenderer(BaseRenderer):
    """A second representation, to prove replays are the stored bytes, not a re-render."""

    media_type = "text/plain"
    format = "txt"
    charset = "utf-8"

    def render(
        self,
        data: Any,
        accepted_media_type: str | None = None,
        renderer_context: Any = None,
    ) -> bytes:
        if isinstance(data, dict):
            return "\n".join(f"{k}={v}" for k, v in sorted(data.items())).encode()
        return str(data).encode()


class ChargeViewSet(IdempotentMixin, ChargeViewSetBase):
    queryset = Charge.objects.all()
    serializer_class = ChargeSerializer
    permission_classes = (IsAuthenticated, HeaderPermission)
    throttle_classes = (HeaderThrottle,)
    renderer_classes = (JSONRenderer, TextRenderer, BrowsableAPIRenderer)

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        response = super().create(request, *args, **kwargs)
        data = request.data if isinstance(request.data, dict) else {}
        if data.get("status"):
            response.status_code = int(data["status"])
        response["Location"] = f"/api/charges/{response.data['id']}/"
        return response

    def perform_create(self, serializer: Any) -> None:
        serializer.save(reference=reference(self.request))
        steer(self.request)

    def perform_update(self, serializer: Any) -> None:
        serializer.save()
        Charge.objects.create(reference=reference(self.request), amount=0)
        steer(self.request)

    def perform_destroy(self, instance: Charge) -> None:
        instance.delete()
        Charge.objects.create(reference=reference(self.request), amount=0)
        steer(self.request)

    @action(detail=True, methods=["post"])
    def refund(self, request: Request, pk: str | None = None) -> Response:
        charge = self.get_object()
        refund = Charge.objects.create(reference=reference(request), amount=-charge.amount)
        steer(request)
        return Response({"refund": refund.pk, "amount": refund.amount}, status=201)


class ChargeAPIView(IdempotentMixin, APIView):
    permission_classes = (IsAuthenticated,)
    serializer_class = ChargeSerializer

    def get(self, request: Request) -> Response:
        return Response({"charges": Charge.objects.count()})

    def post(self, request: Request) -> Response:
        serializer = ChargeSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        charge = serializer.save(reference=reference(request))
        steer(request)
        return Response(serializer.data, status=201, headers={"Location": f"/c/{charge.pk}"})

    def put(self, request: Request) -> Response:
        return self.post(request)


class ChargeCreateView(IdempotentMixin, CreateViewBase):
    serializer_class = ChargeSerializer
    permission_classes = (IsAuthenticated,)

    def perform_create(self, serializer: Any) -> None:
        serializer.save(reference=reference(self.request))
        steer(self.request)


class OptionalKeyView(ChargeAPIView):
    idempotency_required = False


class PutOnlyView(ChargeAPIView):
    idempotency_methods = ("PUT",)


class CustomHeaderView(ChargeAPIView):
    idempotency_header = "X-Request-Key"
    idempotency_ttl = 60


class WebhookView(IdempotentMixin, APIView):
    """A sender signs its events; the event id in the body is the key."""

    authentication_classes = ()
    permission_classes = ()
    serializer_class = ChargeSerializer

    def get_idempotency_key(self, request: Request) -> str | None:
        data = request.data if isinstance(request.data, dict) else {}
        event_id = data.get("event_id")
        return None if event_id is None else str(event_id)

    def get_idempotency_tenant(self, request: Request) -> str:
        return "stripe"

    def post(self, request: Request) -> Response:
        Charge.objects.create(reference=reference(request), amount=0)
        return Response(status=status.HTTP_204_NO_CONTENT)


def envelope_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """A project's EXCEPTION_HANDLER that rewraps every error and drops its headers."""
    response = exception_handler(exc, context)
    if response is None or not isinstance(exc, exceptions.APIException):
        return response
    return Response(
        {"error": {"code": exc.get_codes(), "message": str(exc.detail)}},
        status=response.status_code,
    )
