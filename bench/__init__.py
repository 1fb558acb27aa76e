"""Benchmarks of idempotency_django on PostgreSQL: ``python -m bench`` (``make bench``)."""
