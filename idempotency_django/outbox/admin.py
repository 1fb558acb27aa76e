"""A read-only list of outbox rows, headed by the numbers an operator watches; dead
letters (rows given up on) can be sent again, their key unchanged, or discarded."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse

from idempotency_django.admin import DatabaseFilter, listed_alias
from idempotency_django.outbox import delivery
from idempotency_django.outbox.models import OutboxMessage


class PendingFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            ("pending", "pending"),
            ("failing", "failing"),
            ("dead", "dead letter"),
            ("sent", "sent"),
        ]

    def queryset(self, request: HttpRequest, queryset: Any) -> Any:
        if self.value() == "pending":
            return queryset.filter(sent_at__isnull=True, dead_at__isnull=True)
        if self.value() == "failing":
            return queryset.filter(sent_at__isnull=True, dead_at__isnull=True, failures__gt=0)
        if self.value() == "dead":
            return queryset.filter(sent_at__isnull=True, dead_at__isnull=False)
        if self.value() == "sent":
            return queryset.filter(sent_at__isnull=False)
        return queryset


@admin.register(OutboxMessage)
class OutboxMessageAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = (
        "task",
        "key",
        "created_at",
        "sent_at",
        "dead_at",
        "attempts",
        "failures",
        "uncertain",
        "last_error",
    )
    list_filter = (PendingFilter, "task", DatabaseFilter)
    search_fields = ("key", "task")
    date_hierarchy = "created_at"
    actions = ("send_again", "discard")

    def get_queryset(self, request: HttpRequest) -> Any:
        return super().get_queryset(request).using(listed_alias(request, OutboxMessage))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        extra = {
            **(extra_context or {}),
            "outbox_stats": delivery.stats(listed_alias(request, OutboxMessage)),
        }
        return super().changelist_view(request, extra_context=extra)

    def has_send_again_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("idempotency_outbox.change_outboxmessage")

    def has_discard_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("idempotency_outbox.delete_outboxmessage")

    @admin.action(description="Send dead letters again (same key)", permissions=["send_again"])
    def send_again(self, request: HttpRequest, queryset: QuerySet[OutboxMessage]) -> None:
        chosen = list(queryset.values_list("pk", flat=True))
        unsure = queryset.filter(dead_at__isnull=False, sent_at__isnull=True, uncertain=True)
        doubtful = unsure.count()
        done = delivery.send_again(chosen, using=queryset.db)
        self._report(request, "sent again (the relay publishes them)", done, len(chosen))
        if doubtful:
            self.message_user(
                request,
                f"{doubtful} of them may be a second delivery: their last publish timed out "
                "waiting for the broker's confirm, so the broker may have taken it (the "
                "consumer's idempotency key, the same, makes it a replay there).",
                messages.WARNING,
            )

    @admin.action(description="Discard dead letters", permissions=["discard"])
    def discard(self, request: HttpRequest, queryset: QuerySet[OutboxMessage]) -> None:
        chosen = list(queryset.values_list("pk", flat=True))
        done = delivery.discard(chosen, using=queryset.db)
        self._report(request, "discarded", done, len(chosen))

    def _report(self, request: HttpRequest, what: str, done: int, chosen: int) -> None:
        skipped = f"; {chosen - done} skipped (not dead letters)" if chosen - done else ""
        level = messages.SUCCESS if done else messages.WARNING
        self.message_user(request, f"{done} dead letter(s) {what}{skipped}.", level)
