from __future__ import annotations

from django.urls import URLPattern, URLResolver, path
from rest_framework.routers import SimpleRouter

from tests.testapp import api

router = SimpleRouter()
router.register("charges", api.ChargeViewSet)

urlpatterns: list[URLPattern | URLResolver] = [
    *router.urls,
    path("apiview/", api.ChargeAPIView.as_view()),
    path("generic/", api.ChargeCreateView.as_view()),
    path("optional/", api.OptionalKeyView.as_view()),
    path("put-only/", api.PutOnlyView.as_view()),
    path("custom-header/", api.CustomHeaderView.as_view()),
    path("webhook/", api.WebhookView.as_view()),
]
