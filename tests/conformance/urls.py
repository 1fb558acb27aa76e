"""The conformance endpoints (``tests.conformance.views``) beside the test app's URLs."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, path

from tests.conformance import views

protected: list[URLPattern | URLResolver] = [
    path("conformance/function/", views.function_view),
    path("conformance/cbv/", views.ChargeView.as_view()),
    path("conformance/drf/", views.DrfChargeView.as_view()),
    path("conformance/adrf/", views.AdrfChargeView.as_view()),
    path("conformance/ninja/", views.api.urls),
]

toys: list[URLPattern | URLResolver] = [
    path("toys/unprotected/", views.unprotected),
    path("toys/shared-tenant/", views.shared_tenant),
    path("toys/replay-without-header/", views.replay_without_header),
    path("toys/runs-marked-retries/", views.runs_marked_retries),
    path("toys/replay-instead-of-422/", views.replay_instead_of_422),
    path("toys/runs-on-bad-key/", views.runs_on_bad_key),
    path("toys/stores-5xx/", views.stores_5xx),
    path("toys/final-4xx-not-stored/", views.final_4xx_not_stored),
    path("toys/waits-when-in-flight/", views.waits_when_in_flight),
    path("toys/check-then-act/", views.check_then_act),
    path("toys/drops-key/", views.drops_key),
    path("toys/reexecutes-stamping-replayed/", views.reexecutes_stamping_replayed),
    path(
        "toys/reexecutes-stamping-replayed-string-ids/",
        views.reexecutes_stamping_replayed_string_ids,
    ),
]

# Correct endpoints that follow another implementation's conventions.
others: list[URLPattern | URLResolver] = [
    path("others/keyed-by-request-id/", views.keyed_by_request_id),
    path("others/string-ids/", views.string_ids),
    path("count/", views.count),
]

urlpatterns: list[URLPattern | URLResolver] = [*protected, *toys, *others]
