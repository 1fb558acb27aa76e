"""OpenTelemetry span attributes and metrics from the library's signals (extra ``[opentelemetry]``).

Add ``"idempotency_django.contrib.opentelemetry"`` to ``INSTALLED_APPS``; the
global tracer and meter providers (set up by your OpenTelemetry SDK
configuration, before or after Django starts) receive the data.
"""

# An app for INSTALLED_APPS: nothing to import from it.
__all__: list[str] = []
