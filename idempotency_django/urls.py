"""``path("idempotency/", include("idempotency_django.urls"))``: serves ``keys/<key>/``.

Nothing is served unless a project includes these URLs.
"""

from __future__ import annotations

from django.urls import path

from idempotency_django.views import key_status

app_name = "idempotency_django"

urlpatterns = [
    # <path:…>: a key may hold any visible ASCII, "/" included.
    path("keys/<path:key>/", key_status, name="key-status"),
]


__all__ = ["app_name", "urlpatterns"]
