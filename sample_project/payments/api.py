"""The sample's DRF API: the authenticated user's charges, safe to retry.

Every POST, PUT, PATCH and DELETE needs an ``Idempotency-Key`` header; a retry
with the same key gets the first answer back instead of charging twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.db.models import QuerySet
from rest_framework import viewsets
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from idempotency_django import idempotency_of
from idempotency_django.conformance import conformance_hooks
from idempotency_django.rest_framework import IdempotentMixin
from sample_project.payments.models import Charge
from sample_project.payments.serializers import ChargeSerializer

if TYPE_CHECKING:
    from rest_framework.serializers import BaseSerializer

    ChargeViewSetBase = viewsets.ModelViewSet[Charge]
else:
    ChargeViewSetBase = viewsets.ModelViewSet


class ChargeViewSet(IdempotentMixin, ChargeViewSetBase):
    """Take, list, change and delete your charges (token or session authentication).

    POST, PUT, PATCH and DELETE need an `Idempotency-Key` header (the browsable
    API's forms can't send one: use curl, or the Swagger UI at /api/docs/).
    """

    serializer_class = ChargeSerializer
    permission_classes = (IsAuthenticated,)

    def get_queryset(self) -> QuerySet[Charge]:
        user = self.request.user
        if not user.is_authenticated:  # the schema generator inspects the view anonymously
            return Charge.objects.none()
        return Charge.objects.filter(user=user)

    @conformance_hooks  # inert unless IDEMPOTENCY_CONFORMANCE_HOOKS (docs/verify.rst)
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().create(request, *args, **kwargs)

    def perform_create(self, serializer: BaseSerializer[Charge]) -> None:
        # What we'd send the payment provider as its own Idempotency-Key.
        provider_key = idempotency_of(self.request).derive("provider")
        serializer.save(user=self.request.user, provider_key=provider_key)
