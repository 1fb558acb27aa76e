"""The DRF API (see ``api.py``); empty until the REST framework adapter lands."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver

urlpatterns: list[URLPattern | URLResolver] = []
