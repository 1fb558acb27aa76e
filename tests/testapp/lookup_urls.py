"""The test app's URLs plus the key lookup, mounted three ways: Django, DRF and Ninja."""

from __future__ import annotations

from typing import cast

from django.urls import URLPattern, URLResolver, include, path
from ninja import NinjaAPI
from ninja.security import django_auth
from rest_framework.authentication import BasicAuthentication, SessionAuthentication

from idempotency_django.ninja_keys import key_router
from idempotency_django.rest_framework_keys import KeyStatusView
from tests.testapp.urls import urlpatterns as base

keys_api = NinjaAPI(urls_namespace="keys-ninja", auth=django_auth)
keys_api.add_router("/idempotency/", key_router())

urlpatterns: list[URLPattern | URLResolver] = [
    *cast(list[URLPattern | URLResolver], base),
    path("idempotency/", include("idempotency_django.urls")),
    path("drf/idempotency/keys/<path:key>/", KeyStatusView.as_view()),
    path("ninja-keys/", keys_api.urls),
    # DRF's own default authentication classes, whatever tests/settings.py sets.
    path(
        "drf-defaults/idempotency/keys/<path:key>/",
        KeyStatusView.as_view(authentication_classes=[SessionAuthentication, BasicAuthentication]),
    ),
]
