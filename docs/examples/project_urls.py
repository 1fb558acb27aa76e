"""The project's URLconf (``mysite/urls.py``) with the quick start's URLs included."""

from __future__ import annotations

from django.apps import apps
from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("payments.urls")),
]

if apps.is_installed("rest_framework"):  # the DRF viewset: the [drf] extra and its snippet
    urlpatterns.append(path("api/", include("payments.api_urls")))
if apps.is_installed("ninja"):  # the Ninja API: the [ninja] extra and its snippet
    from payments.ninja_api import api

    urlpatterns.append(path("ninja/", api.urls))
