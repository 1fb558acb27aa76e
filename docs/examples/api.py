"""The quick start's Django REST framework API: a viewset of the caller's charges."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers, viewsets
from rest_framework.permissions import IsAuthenticated

from idempotency_django import idempotency_of
from idempotency_django.rest_framework import IdempotentMixin

from .models import Charge


class ChargeSerializer(serializers.ModelSerializer):
    class Meta:
        model = Charge
        fields = ("id", "amount", "created_at")
        read_only_fields = ("id", "created_at")


# IdempotentMixin first among the bases: it claims the key after DRF has
# authenticated the caller, so each user has a key space of their own.
class ChargeViewSet(IdempotentMixin, viewsets.ModelViewSet):
    serializer_class = ChargeSerializer
    permission_classes = (IsAuthenticated,)

    def get_queryset(self) -> Any:
        return Charge.objects.filter(user=self.request.user)

    def perform_create(self, serializer: Any) -> None:
        serializer.save(
            user=self.request.user,
            provider_key=idempotency_of(self.request).derive("provider"),
        )
