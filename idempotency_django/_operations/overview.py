"""The admin's overview of the entries: counts by status and answer over the last hour
and day, a chart of them per hour (inline SVG drawn here, no JavaScript), the oldest key
in flight, the purge's lag, and the dead letters waiting (outbox, consumers).

It stays fast on a table of ten million rows, with no full count and no new index:

* the window's counts read at most :data:`COUNTED` entries, the newest ones, found
  by walking the primary key's index backwards (ids grow with time: the claim inserts
  the row with the database's clock); when the day holds more, the page says how far
  back the count reaches;
* the table's total is an estimate (:func:`~idempotency_django._operations.progress.estimate`:
  the planner's, from ``pg_class.reltuples``, on PostgreSQL);
* the keys in flight come through the in-progress entries' partial index, the purge's
  lag from one probe of the ``expires_at`` index (:mod:`~idempotency_django._operations.glance`).

Panels show only what the viewing user may see in the admin: the outbox's and the
consumers' only to a user whose admin may view those models.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlencode

from django.core.exceptions import PermissionDenied
from django.db.models import Count, DateTimeField, ExpressionWrapper, Model, Q, QuerySet
from django.db.models.functions import Now, TruncHour
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone

from idempotency_django._operations import glance, progress
from idempotency_django.models import IdempotencyEntry

if TYPE_CHECKING:
    from django.contrib.admin import AdminSite

    from idempotency_django.admin import IdempotencyEntryAdmin

#: At most this many entries (the newest) are counted per page load.
COUNTED: Final = 100_000
HOURS: Final = 24  # bars in the chart, one per clock hour
TEMPLATE: Final = "admin/idempotency_django/overview.html"
Status = IdempotencyEntry.Status
#: The chart's series: a status, its colour and its label.
SERIES: Final = (
    (Status.COMPLETED, "#2e7d32", "completed"),
    (Status.FAILED_FINAL, "#c62828", "failed (final)"),
    (Status.IN_PROGRESS, "#f9a825", "in progress"),
)


@dataclass
class Window:
    """Entries created in the last hour and day, by (status, answer class)."""

    hour: dict[tuple[str, str], int] = field(default_factory=dict)
    day: dict[tuple[str, str], int] = field(default_factory=dict)
    per_hour: dict[datetime, dict[str, int]] = field(default_factory=dict)
    reaches_back: datetime | None = None  # set when the day holds more than COUNTED

    def rows(self) -> list[tuple[str, str, int, int]]:
        """``(status, answer, last hour, last day)``, by status then answer."""
        return [
            (label(status), answer, self.hour.get((status, answer), 0), n)
            for (status, answer), n in sorted(self.day.items())
        ]


def label(status: str) -> str:
    return str(Status(status).label)


def answer_class(status: int | None) -> str:
    return "-" if status is None else f"{status // 100}xx"


def _ago(delta: timedelta) -> ExpressionWrapper[Any]:
    return ExpressionWrapper(Now() - delta, output_field=DateTimeField())


def window(rows: QuerySet[IdempotencyEntry]) -> Window:
    """Count the last day's entries among the newest :data:`COUNTED`; two index-backed
    queries, then one over at most that many rows."""
    found, recent = Window(), rows.filter(created_at__gte=_ago(timedelta(days=1)))
    floor = rows.order_by("-pk").values_list("pk", flat=True)[COUNTED - 1 : COUNTED].first()
    if floor is not None:
        recent = recent.filter(pk__gte=floor)
        oldest = rows.filter(pk=floor).values_list("created_at", flat=True).first()
        if oldest is not None and oldest > timezone.now() - timedelta(days=1):
            found.reaches_back = oldest
    grouped = (
        recent.order_by()  # the admin's ordering would join the GROUP BY: a group per row
        .annotate(bucket=TruncHour("created_at"))
        .values("status", "response_status", "bucket")
        .annotate(
            day=Count("pk"), hour=Count("pk", filter=Q(created_at__gte=_ago(timedelta(hours=1))))
        )
    )
    for group in grouped:
        key = (group["status"], answer_class(group["response_status"]))
        found.day[key] = found.day.get(key, 0) + group["day"]
        found.hour[key] = found.hour.get(key, 0) + group["hour"]
        bar = found.per_hour.setdefault(group["bucket"], {})
        bar[group["status"]] = bar.get(group["status"], 0) + group["day"]
    return found


@dataclass(frozen=True)
class Bar:
    x: int
    title: str
    segments: list[tuple[int, int, str]]  # (y, height, colour)


def chart(per_hour: dict[datetime, dict[str, int]], now: datetime) -> list[Bar]:
    """One stacked bar per clock hour of the last day, scaled to the fullest, 100 px high."""
    top = timezone.localtime(now).replace(minute=0, second=0, microsecond=0)
    hours = [top - timedelta(hours=HOURS - 1 - i) for i in range(HOURS)]
    fullest = max((sum(bar.values()) for bar in per_hour.values()), default=0) or 1
    bars = []
    for i, hour in enumerate(hours):
        counts, y, segments = per_hour.get(hour, {}), 100, []
        for status, colour, _ in SERIES:
            height = round(100 * counts.get(status, 0) / fullest)
            if height:
                y -= height
                segments.append((y, height, colour))
        text = ", ".join(f"{counts.get(s, 0)} {name}" for s, _, name in SERIES)
        bars.append(Bar(i * 20, f"{hour:%H}:00: {text}", segments))
    return bars


def model_admin_for(request: HttpRequest, site: AdminSite, model: type[Model]) -> Any:
    """The site's admin for ``model`` if this user may view its list, else ``None``."""
    model_admin = site._registry.get(model)
    if model_admin is None or not model_admin.has_view_or_change_permission(request):
        return None
    return model_admin


def changelist_url(model_admin: Any, query: str) -> str:
    opts = model_admin.opts
    name = f"{model_admin.admin_site.name}:{opts.app_label}_{opts.model_name}_changelist"
    return f"{reverse(name)}?{query}"


def _change_page(model_admin: Any, pk: int, alias: str) -> str:
    opts = model_admin.opts
    name = f"{model_admin.admin_site.name}:{opts.app_label}_{opts.model_name}_change"
    return f"{reverse(name, args=[pk])}?{urlencode({'_changelist_filters': f'database={alias}'})}"


@dataclass(frozen=True)
class Panel:
    """A panel of figures: each a label, a number, its unit and a link (or ``None``)."""

    id: str
    title: str
    rows: list[tuple[str, float, str, str | None]]


PanelSource = Callable[[HttpRequest, "AdminSite"], Panel | None]
_panels: dict[str, PanelSource] = {}


def register_panel(name: str, source: PanelSource) -> None:
    """Show ``source(request, site)`` on the overview (``None``: nothing for this user).

    A feature app (the outbox) registers its panel from its ``AppConfig.ready()``: the
    core imports no feature app. Registering ``name`` again replaces it.
    """
    _panels[name] = source


def consumers_panel(request: HttpRequest, site: AdminSite) -> Panel | None:
    if not glance.consumers_installed():
        return None
    from idempotency_django.admin import listed_alias
    from idempotency_django.consumers.models import ConsumerFailure

    model_admin = model_admin_for(request, site, ConsumerFailure)
    if model_admin is None:
        return None
    found = glance.consumer_failures(listed_alias(request, ConsumerFailure))
    return Panel(
        "consumers",
        "Consumers",
        [
            ("failing", found.failing, "", changelist_url(model_admin, "state=failing")),
            ("dead letters waiting", found.dead, "", changelist_url(model_admin, "state=dead")),
        ],
    )


def panels(request: HttpRequest, site: AdminSite) -> list[Panel]:
    sources = [consumers_panel, *_panels.values()]
    return [panel for panel in (source(request, site) for source in sources) if panel]


def entries_panel(model_admin: IdempotencyEntryAdmin, request: HttpRequest) -> dict[str, Any]:
    rows = model_admin.get_queryset(request)
    alias = rows.db
    counted, flight = window(rows), glance.in_flight(alias)
    oldest = rows.filter(pk=flight.oldest_pk).first() if flight.oldest_pk else None
    return {
        "alias": alias,
        "total": progress.estimate_queryset(rows),
        "counted": counted,
        "rows": counted.rows(),
        "bars": chart(counted.per_hour, timezone.now()),
        "series": SERIES,
        "in_flight": flight,
        "oldest": oldest,
        "oldest_url": oldest and _change_page(model_admin, oldest.pk, alias),
        "purge_lag": glance.purge_lag(alias),
    }


def page(model_admin: IdempotencyEntryAdmin, request: HttpRequest) -> HttpResponse:
    """The overview, for a user who may view the entries' list."""
    if not model_admin.has_view_or_change_permission(request):
        raise PermissionDenied
    site = model_admin.admin_site
    context = {
        **site.each_context(request),
        "title": "Idempotency overview",
        "opts": model_admin.opts,
        "entries": entries_panel(model_admin, request),
        "panels": panels(request, site),
        "counted_at_most": COUNTED,
    }
    return TemplateResponse(request, TEMPLATE, context)
