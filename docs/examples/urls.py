"""The quick start's URLs: include them from the project's ROOT_URLCONF."""

from __future__ import annotations

from django.urls import include, path
from rest_framework.routers import DefaultRouter

from . import api, views

router = DefaultRouter()
router.register("charges", api.ChargeViewSet, basename="charge")

urlpatterns = [
    path("charges/", views.create_charge, name="create-charge"),
    path("charges/<int:pk>/refunds/", views.RefundView.as_view(), name="create-refund"),
    path("api/", include(router.urls)),
]
