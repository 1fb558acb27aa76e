"""The DRF representation of a charge."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rest_framework import serializers

from sample_project.payments.models import Charge

if TYPE_CHECKING:
    ChargeSerializerBase = serializers.ModelSerializer[Charge]
else:
    ChargeSerializerBase = serializers.ModelSerializer


class ChargeSerializer(ChargeSerializerBase):
    class Meta:
        model = Charge
        fields = ("id", "amount", "currency", "description", "provider_key", "created_at")
        read_only_fields = ("provider_key", "created_at")

    def validate_amount(self, value: int) -> int:
        if value <= 0:
            raise serializers.ValidationError("The amount must be positive.")
        return value
