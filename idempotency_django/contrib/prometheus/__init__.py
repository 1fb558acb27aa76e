"""Prometheus metrics from the library's signals (extra ``[prometheus]``).

Add ``"idempotency_django.contrib.prometheus"`` to ``INSTALLED_APPS`` and route
:func:`idempotency_django.contrib.prometheus.views.metrics` (e.g. at ``/metrics``).
"""

# An app for INSTALLED_APPS: nothing to import from it.
__all__: list[str] = []
