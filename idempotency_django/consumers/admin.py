"""A read-only list of consumer failure counts: messages failing now, and dead letters
(messages given up on, kept until ``purge_idempotency`` drops them after IDEMPOTENCY_TTL).

The message itself is on the broker's dead-letter path (a subject, queue, stream or
topic); here are its key, its failures and the last error.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from idempotency_django._protocol.keys import SEPARATOR
from idempotency_django.admin import DatabaseFilter, listed_alias
from idempotency_django.consumers.models import ConsumerFailure


class StateFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("failing", "failing"), ("dead", "dead letter")]

    def queryset(self, request: HttpRequest, queryset: Any) -> Any:
        if self.value() == "failing":
            return queryset.filter(dead_at=None)
        if self.value() == "dead":
            return queryset.exclude(dead_at=None)
        return queryset


@admin.register(ConsumerFailure)
class ConsumerFailureAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("scope", "message_id", "tenant", "failures", "first_failed_at", "dead_at")
    list_filter = (StateFilter, DatabaseFilter)
    search_fields = ("key", "tenant")
    readonly_fields = ("tenant", "key", "failures", "first_failed_at", "dead_at", "last_error")
    ordering = ("-first_failed_at",)

    def get_queryset(self, request: HttpRequest) -> Any:
        return super().get_queryset(request).using(listed_alias(request, ConsumerFailure))

    @admin.display(description="scope")
    def scope(self, row: ConsumerFailure) -> str:
        return row.key.partition(SEPARATOR)[0]

    @admin.display(description="message id")
    def message_id(self, row: ConsumerFailure) -> str:
        return row.key.partition(SEPARATOR)[2]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False
