"""Settings of the sample payments project: SQLite unless ``DATABASE_URL`` is set."""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url
import django

BASE_DIR = Path(__file__).resolve().parent
SECRET_KEY = os.environ.get("SECRET_KEY", "sample-project-not-secret")
DEBUG = os.environ.get("DEBUG", "1") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "[::1]"]
USE_TZ = True
TIME_ZONE = "UTC"
ROOT_URLCONF = "sample_project.urls"
WSGI_APPLICATION = "sample_project.wsgi.application"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
STATIC_URL = "static/"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI's and ReDoc's assets, served offline
    "ninja",  # its /ninja/docs page then loads Swagger UI from static files, not a CDN
    "idempotency_django",
    "idempotency_django.outbox",
    "idempotency_django.contrib.prometheus",
    "sample_project.payments",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

DATABASES = {
    "default": dj_database_url.config(
        default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}",
        conn_max_age=int(os.environ.get("CONN_MAX_AGE", "0")),
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Writers queue for the lock instead of failing when two requests race.
    DATABASES["default"]["OPTIONS"] = {"transaction_mode": "IMMEDIATE", "timeout": 20}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Sample payments API",
    "VERSION": "1.0.0",
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# idempotency_django: every setting at its default, spelled out for the reader.
IDEMPOTENCY_HEADER = "Idempotency-Key"
IDEMPOTENCY_REQUIRED = True
IDEMPOTENCY_TTL = 24 * 60 * 60
IDEMPOTENCY_LEASE = 60
IDEMPOTENCY_TENANT_RESOLVER = "idempotency_django.tenants.user_pk"
IDEMPOTENCY_DATABASE = "default"
IDEMPOTENCY_CACHE = None
if os.environ.get("REDIS_URL"):
    CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "idempotency": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": os.environ["REDIS_URL"],
        },
    }
    IDEMPOTENCY_CACHE = "idempotency"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"idempotency_django": {"handlers": ["console"], "level": "WARNING"}},
}

# Celery (sample_project/celery_app.py) and the outbox. Without CELERY_BROKER_URL the
# receipt runs eagerly in the web process: `make run` needs no broker. With one,
# run `celery -A sample_project.celery_app worker -l INFO` and `manage.py relay_outbox --every 30`.
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "memory://")
CELERY_TASK_ALWAYS_EAGER = "CELERY_BROKER_URL" not in os.environ
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
if django.VERSION >= (6, 1):  # MAILERS replaces EMAIL_BACKEND from Django 6.1
    MAILERS = {"default": {"BACKEND": "django.core.mail.backends.console.EmailBackend"}}
else:
    EMAIL_BACKEND = "django.core.mail.backends.console.EmailBackend"
# Or the receipt as a django.tasks task (SAMPLE_TASKS=django): Django's ImmediateBackend
# runs it in the web process after the commit; with SAMPLE_TASKS_DATABASE=1 the
# django-tasks-db backend stores it for `manage.py db_worker`.
SAMPLE_TASKS = os.environ.get("SAMPLE_TASKS", "celery")
if os.environ.get("SAMPLE_TASKS_DATABASE"):
    INSTALLED_APPS += [*([] if django.VERSION >= (6, 0) else ["django_tasks"]), "django_tasks_db"]
    TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
WEBHOOK_SECRET = os.environ.get("WEBHOOK_SECRET", "sample-webhook-secret")

# Load the Celery app with the settings (Celery's Django guide does it in the
# project's __init__.py; here the test suite, which installs the payments app
# under its own settings, then never imports Celery).
from sample_project.celery_app import app as celery_app  # noqa: E402, F401
