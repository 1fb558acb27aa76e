"""The DRF API under /api/: charges, the OpenAPI schema, its Swagger UI and ReDoc."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, include, path
from drf_spectacular.views import (
    SpectacularAPIView,
    SpectacularRedocView,
    SpectacularSwaggerView,
)
from rest_framework.routers import DefaultRouter

from sample_project.payments.api import ChargeViewSet

router = DefaultRouter()
router.register("charges", ChargeViewSet, basename="api-charge")

urlpatterns: list[URLPattern | URLResolver] = [
    path("", include(router.urls)),
    path("auth/", include("rest_framework.urls")),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="swagger-ui"),
    path("redoc/", SpectacularRedocView.as_view(url_name="schema"), name="redoc"),
]
