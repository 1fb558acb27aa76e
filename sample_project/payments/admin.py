from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import admin

from idempotency_django.admin import IdempotentAdminMixin
from sample_project.payments.models import Charge

if TYPE_CHECKING:
    ChargeAdminBase = admin.ModelAdmin[Charge]
else:
    ChargeAdminBase = admin.ModelAdmin


@admin.register(Charge)
class ChargeAdmin(IdempotentAdminMixin, ChargeAdminBase):
    """Add, change, delete and actions run once per rendered form ("Save" pressed twice)."""

    list_display = ("id", "amount", "currency", "user", "created_at")


# The changelists' columns get the width at 1280 px (the « toggle needs it anyway).
admin.site.enable_nav_sidebar = False
