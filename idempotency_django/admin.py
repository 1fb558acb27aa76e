"""A read-only admin for idempotency entries, with one action: release stuck claims."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import parse_qs

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.options import BaseModelAdmin
from django.core.exceptions import ImproperlyConfigured
from django.db.models import Model, QuerySet
from django.db.models.functions import Now
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import format_html
from django.utils.translation import ngettext

from idempotency_django import lookup, purge
from idempotency_django._adapters.decorators import handle
from idempotency_django._protocol.keys import readable
from idempotency_django._protocol.options import Options
from idempotency_django.databases import possible_aliases
from idempotency_django.forms import KEEPER, hidden_input, require_first
from idempotency_django.models import IdempotencyEntry

if TYPE_CHECKING:
    EntryAdminBase = admin.ModelAdmin[IdempotencyEntry]
else:
    EntryAdminBase = admin.ModelAdmin

Status = IdempotencyEntry.Status
BODY_PERMISSION = "view_idempotency_body"
KEY_SHOWN = 37  # characters of a key in the changelist; a UUID's 36 fit
TENANT_SHOWN = 20  # a user id whole; a visitor's session digest cut (whole in the tooltip)


class ExpiredFilter(admin.SimpleListFilter):
    title = "expired"
    parameter_name = "expired"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "Yes"), ("no", "No")]

    def queryset(
        self, request: HttpRequest, queryset: QuerySet[IdempotencyEntry]
    ) -> QuerySet[IdempotencyEntry]:
        if self.value() == "yes":
            return queryset.filter(expires_at__lte=Now())
        if self.value() == "no":
            return queryset.filter(expires_at__gt=Now())
        return queryset


class DatabaseFilter(admin.SimpleListFilter):
    """Which alias's entries are listed, when more than one may hold them (shards)."""

    title = "database"
    parameter_name = "database"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        aliases = possible_aliases(model_admin.model)
        return [(alias, alias) for alias in aliases] if len(aliases) > 1 else []

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset  # get_queryset() already picked the alias


def listed_alias(request: HttpRequest, model: type[Model] = IdempotencyEntry) -> str:
    """The alias the admin shows: ``?database=`` (kept in a detail page's changelist filters)."""
    aliases = possible_aliases(model)
    filters = parse_qs(request.GET.get("_changelist_filters", ""))
    wanted = request.GET.get("database") or filters.get("database", [""])[0]
    return wanted if wanted in aliases else aliases[0]


@admin.register(IdempotencyEntry)
class IdempotencyEntryAdmin(EntryAdminBase):
    # The status right after the key, and long keys cut (whole in the tooltip): the
    # columns that matter stay on a 1280 px screen.
    list_display = (
        "readable_key",
        "status",
        "answer",
        "tenant_shown",
        "created",
        "expires",
        "expired",
    )
    list_filter = ("status", ExpiredFilter, DatabaseFilter)
    # Exact matches: they use the (tenant, key) index and an operator pastes whole keys.
    search_fields = ("=key", "=tenant")
    search_help_text = "Exact key or tenant."
    # Ordering by the primary key and skipping the full count keep a big table's changelist fast.
    ordering = ("-id",)
    show_full_result_count = False
    fields = (
        "tenant",
        "key",
        "status",
        "fingerprint",
        "locked_until",
        "created_at",
        "expires_at",
        "response_status",
        "body",
    )
    # Opened on demand, only for users with the permission (see get_fields).
    answer_fields = ("stored_note", "stored_headers", "stored_body")
    readonly_fields = (*fields, *answer_fields)
    actions = ("release_stuck",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[IdempotencyEntry]:
        return super().get_queryset(request).using(listed_alias(request))

    def get_urls(self) -> list[URLPattern]:
        """``overview/``: the entries at a glance (``_operations/overview.py``); the
        changelist links to it."""
        from idempotency_django._operations import overview

        def view(request: HttpRequest) -> HttpResponse:
            return overview.page(self, request)

        name = f"{self.opts.app_label}_{self.opts.model_name}_overview"
        return [path("overview/", self.admin_site.admin_view(view), name=name), *super().get_urls()]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is not None and self.has_body_permission(request):
            return (*self.fields, *self.answer_fields)
        return self.fields

    def has_body_permission(self, request: HttpRequest) -> bool:
        """Opening a stored answer takes ``view_idempotency_body``: it is another party's answer."""
        return request.user.has_perm(f"{self.opts.app_label}.{BODY_PERMISSION}")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_release_permission(self, request: HttpRequest) -> bool:
        """Releasing deletes an entry, so it takes the model's delete permission."""
        opts = self.opts
        return request.user.has_perm(f"{opts.app_label}.delete_{opts.model_name}")

    @admin.display(description="key", ordering="key")
    def readable_key(self, entry: IdempotencyEntry) -> str:
        key = readable(entry.key)  # a task's scope and key apart, not joined by \x1f
        if len(key) <= KEY_SHOWN:
            return key
        return format_html('<span title="{}">{}…</span>', key, key[: KEY_SHOWN - 1])

    @admin.display(description="tenant", ordering="tenant")
    def tenant_shown(self, entry: IdempotencyEntry) -> str:
        """Cut like the key: a visitor's tenant (``session:`` and a digest) is 72 characters."""
        if len(entry.tenant) <= TENANT_SHOWN:
            return entry.tenant
        return format_html(
            '<span title="{}">{}…</span>', entry.tenant, entry.tenant[: TENANT_SHOWN - 1]
        )

    @admin.display(description="answer", ordering="response_status")
    def answer(self, entry: IdempotencyEntry) -> int | None:
        return entry.response_status

    @admin.display(description="created at", ordering="created_at")
    def created(self, entry: IdempotencyEntry) -> str:
        return _compact(entry.created_at)

    @admin.display(description="expires at", ordering="expires_at")
    def expires(self, entry: IdempotencyEntry) -> str:
        return _compact(entry.expires_at)

    @admin.display(boolean=True, description="expired")
    def expired(self, entry: IdempotencyEntry) -> bool:
        return entry.expires_at <= timezone.now()

    @admin.display(description="response body")
    def body(self, entry: IdempotencyEntry) -> str:
        # Shown by size and type, never rendered: it is another party's answer.
        return lookup.body_summary(entry)

    @admin.display(description="stored answer")
    def stored_note(self, entry: IdempotencyEntry) -> str:
        return lookup.opened(entry, entry._state.db or "default")[1] or "opened"

    @admin.display(description="stored headers")
    def stored_headers(self, entry: IdempotencyEntry) -> str:
        answer, _ = lookup.opened(entry, entry._state.db or "default")
        return "\n".join(f"{n}: {v}" for n, v in answer.headers) if answer else "-"

    @admin.display(description="stored body")
    def stored_body(self, entry: IdempotencyEntry) -> str:
        # Text, escaped by the admin's template: never rendered as the answer's own HTML.
        answer, _ = lookup.opened(entry, entry._state.db or "default")
        return answer.body.decode("utf-8", "backslashreplace") if answer else "-"

    @admin.action(description="Release stuck in-progress entries", permissions=["release"])
    def release_stuck(self, request: HttpRequest, queryset: QuerySet[IdempotencyEntry]) -> None:
        ids = list(queryset.values_list("id", flat=True))
        released = purge.release(ids, using=queryset.db)
        released_text = ngettext(
            "Released %(count)d stuck in-progress entry",
            "Released %(count)d stuck in-progress entries",
            released,
        ) % {"count": released}
        self.message_user(
            request,
            f"{released_text}; skipped {len(ids) - released} "
            "(finished, lease not yet passed, or held by a running request).",
            messages.SUCCESS if released else messages.WARNING,
        )


def _compact(moment: datetime) -> str:
    """``2026-11-24 13:02``, in the current time zone: a column, not a sentence."""
    return date_format(timezone.localtime(moment) if settings.USE_TZ else moment, "Y-m-d H:i")


# --- Protecting a project's own ModelAdmins (docs/forms.rst) -------------------------------------

# Django renders {% csrf_token %} exactly so: every admin form that posts holds one, and
# gets its own fresh key right after it (change form, changelist actions, delete pages).
_CSRF_INPUT = re.compile(rb'<input type="hidden" name="csrfmiddlewaretoken" value="[^"]*">')


class IdempotentAdminMixin:
    """Run a ``ModelAdmin``'s add, change and delete views and its actions once per
    rendered form: ``class OrderAdmin(IdempotentAdminMixin, admin.ModelAdmin)``.

    Every form those pages render carries a fresh ``idempotency_key``; a post that
    carries none (a template of the project's that drops it) runs unprotected, as
    the admin always did. The admin site's login check runs first: the key space
    is the staff user's. Options are ``@idempotent``'s keywords in
    ``idempotency_options``.
    """

    idempotency_options: ClassVar[Mapping[str, Any]] = {"required": False}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        require_first(cls, IdempotentAdminMixin, BaseModelAdmin, "admin.ModelAdmin")

    def get_idempotency_options(self) -> Options:
        return _admin_options(type(self).__qualname__, self.idempotency_options)

    @property
    def media(self) -> forms.Media:
        # The admin's pages are never cached: Back may fetch them again (Chromium does once a
        # cookie changed, as the message after a save), rendered with new keys.
        parent: Any = super()
        return parent.media + forms.Media(js=[KEEPER])  # type: ignore[no-any-return]

    def add_view(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        return self._once(request, "add_view", args, kwargs)

    def change_view(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        return self._once(request, "change_view", args, kwargs)

    def delete_view(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        return self._once(request, "delete_view", args, kwargs)

    def changelist_view(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        # Its POSTs are the actions (and list_editable's saves).
        return self._once(request, "changelist_view", args, kwargs)

    def _once(
        self, request: HttpRequest, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> HttpResponse:
        view = getattr(super(), name)

        def call() -> HttpResponse:
            return with_form_keys(view(request, *args, **kwargs))

        return handle(request, self.get_idempotency_options(), call)


def _admin_options(owner: str, options: Mapping[str, Any]) -> Options:
    try:
        return Options.build(**options)
    except TypeError as exc:
        raise ImproperlyConfigured(f"{owner}.idempotency_options: {exc}") from exc


def with_form_keys(response: HttpResponse) -> HttpResponse:
    """``response`` with a fresh ``idempotency_key`` in each of its forms that post."""
    if isinstance(response, TemplateResponse) and not response.is_rendered:
        response.add_post_render_callback(_insert_keys)
    return response


def _insert_keys(response: HttpResponse) -> None:
    def keyed(match: re.Match[bytes]) -> bytes:
        return match.group(0) + hidden_input().encode()

    response.content = _CSRF_INPUT.sub(keyed, response.content)


def protect_admin(site: admin.AdminSite | None = None) -> None:
    """Give every ``ModelAdmin`` registered on ``site`` (``admin.site``) the mixin.

    One line in ``urls.py``, after the registrations (``admin.autodiscover()`` has run
    when ``urls.py`` is imported) and before ``site.urls`` is read:
    ``protect_admin(admin.site)``. A ``ModelAdmin`` that has the mixin keeps its own.
    """
    for model_admin in (site or admin.site)._registry.values():
        cls = type(model_admin)
        if not isinstance(model_admin, IdempotentAdminMixin):
            protected = type(
                cls.__name__, (IdempotentAdminMixin, cls), {"__module__": cls.__module__}
            )
            model_admin.__class__ = protected


__all__ = ["IdempotentAdminMixin", "protect_admin"]
