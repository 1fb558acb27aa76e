"""The quick start's URLs: include them from the project's ROOT_URLCONF."""

from __future__ import annotations

from django.urls import path

from . import views

urlpatterns = [
    path("charges/", views.create_charge, name="create-charge"),
    path("charges/<int:pk>/", views.charge_detail, name="charge-detail"),
    path("charges/<int:pk>/refunds/", views.RefundView.as_view(), name="create-refund"),
]
