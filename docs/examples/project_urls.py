"""The project's URLconf (``mysite/urls.py``) with the quick start's URLs included."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("payments.urls")),
    path("api/", include("payments.api_urls")),  # the DRF viewset, with [drf]
]
