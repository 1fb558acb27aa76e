"""The quick start's DRF URLs (``idempotency-django[drf]``): include them under ``api/``."""

from __future__ import annotations

from rest_framework.routers import DefaultRouter

from . import api

router = DefaultRouter()
router.register("charges", api.ChargeViewSet, basename="charge")

urlpatterns = router.urls
