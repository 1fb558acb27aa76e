from django.urls import include, path

from tests.testapp import lock_views, ninja_api, views

try:  # Graphene needs graphql-core < 3.3, which Strawberry >= 0.328 does not take
    from tests.testapp import graphene_api  # noqa: F401
except ImportError:  # pragma: no cover  (the test group installs both: see pyproject.toml)
    graphene_urls = []
else:
    graphene_urls = [path("graphene/", include("tests.testapp.graphene_api"))]

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
    *graphene_urls,
]
