"""Settings of the benchmark: PostgreSQL from ``DATABASE_URL``, on a scratch database.

``DATABASE_URL`` names the server; the benchmark creates and drops its own
database on it (``BENCH_DATABASE``, set by ``python -m bench`` to
``idem_bench_<pid>``) and never touches the one the URL names.
"""

from __future__ import annotations

import importlib.util
import os

import dj_database_url

from bench import scratch

SECRET_KEY = "bench-only-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "bench.urls"
WSGI_APPLICATION = "bench.wsgi.application"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "rest_framework",
    "rest_framework.authtoken",  # the token-authenticated DRF views
    "idempotency_django",
    "tests.testapp",
]
# django-idempotency-key, the peer the DRF path is compared with (the dev group has it).
PEER = importlib.util.find_spec("idempotency_key") is not None
# The outbox (issue 12) is measured when this checkout has it.
OUTBOX = importlib.util.find_spec("idempotency_django.outbox") is not None
if OUTBOX:
    INSTALLED_APPS.append("idempotency_django.outbox")

# Empty on purpose: both sides of every comparison pay the same framework cost,
# and the less of it there is, the less noise hides the difference.
MIDDLEWARE: list[str] = []

DATABASE_URL = os.environ.get("DATABASE_URL", "")
# The run's scratch database (bench.scratch: idem_bench_<pid>, or BENCH_DATABASE).
BENCH_DATABASE = scratch.MAIN
DATABASES = {
    # Persistent connections, as a production app server keeps them.
    "default": dj_database_url.parse(
        DATABASE_URL or "postgres://postgres@127.0.0.1:5432/postgres", conn_max_age=600
    )
}
DATABASES["default"]["NAME"] = BENCH_DATABASE
# The same database through connections that bind parameters server-side and
# prepare statements after 5 runs: Django's default binds client-side and never
# prepares (for connection poolers), so this alias measures what that costs.
DATABASES["prepared"] = {
    **DATABASES["default"],
    "OPTIONS": {"server_side_binding": True, "prepare_threshold": 5},
}
# The scale case's 10,000,000 entries, claimed next to the empty default's.
DATABASES["scale"] = {**DATABASES["default"], "NAME": f"{BENCH_DATABASE}_scale"}

REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/12")
PEER_REDIS_URL = REDIS_URL
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "replay": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": BENCH_DATABASE,
        "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 0.5, "SOCKET_TIMEOUT": 0.5},
    },
    # django-idempotency-key's answers, as several workers need them (bench.views._peer).
    "peer": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": f"{BENCH_DATABASE}-peer",
    },
    # The same Redis through Django's own backend: the cache's generic path.
    "replay_generic": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": f"{BENCH_DATABASE}-generic",
        "OPTIONS": {"socket_connect_timeout": 0.5, "socket_timeout": 0.5},
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"null": {"class": "logging.NullHandler"}},
    "loggers": {"django.request": {"handlers": ["null"], "propagate": False}},
}
