# With idempotency-django[drf], for the viewset: added after settings_snippet.py.

INSTALLED_APPS += ["rest_framework"]
