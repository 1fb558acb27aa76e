from django.urls import include, path

from tests.testapp import lock_views, ninja_api, views

urlpatterns = [
    path("charges/", views.charge),
    path("charges/short-lease/", views.charge_short_lease),
    path("charges/optional/", views.charge_optional),
    path("charges/put-only/", views.charge_put_only),
    path("charges/cbv/", views.ChargeView.as_view()),
    path("charges/async/", views.async_charge),
    path("webhooks/", views.webhook),
    path("binary/", views.binary),
    path("derive/", views.derive),
    path("api/", include("tests.testapp.api_urls")),
    path("protocols/charges/", lock_views.by_headers),
    path("ninja/", ninja_api.api.urls),
    path("adrf/", include("tests.testapp.adrf_api")),
    path("graphql/", include("tests.testapp.strawberry_api")),
    path("graphene/", include("tests.testapp.graphene_api")),
]
