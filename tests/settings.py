"""Settings for the test suite: SQLite unless ``DATABASE_URL`` names another database."""

from __future__ import annotations

import os
import tempfile

import dj_database_url
import django

SECRET_KEY = "tests-only-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "tests.testapp.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Django's Tasks framework: built in from Django 6.0, the django-tasks backport on 5.2;
# the database backend (django-tasks-db, its own migrations) for the db_worker tests.
TASKS_MODULE = "django.tasks" if django.VERSION >= (6, 0) else "django_tasks"
TASKS_APPS = [] if django.VERSION >= (6, 0) else ["django_tasks"]
TASKS_APPS.append("django_tasks_db")
TASKS = {
    "default": {"BACKEND": f"{TASKS_MODULE}.backends.immediate.ImmediateBackend"},
    "database": {"BACKEND": "django_tasks_db.DatabaseBackend"},
}

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.admin",
    "rest_framework",
    "rest_framework.authtoken",
    "ninja",
    "idempotency_django",
    "idempotency_django.outbox",
    "idempotency_django.consumers",
    "tests.testapp",
    # The sample's app, so that mypy (which reads these settings) knows its models.
    "sample_project.payments",
    *TASKS_APPS,
]

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "django.template.context_processors.request",
            ]
        },
    }
]

DATABASE_URL = os.environ.get("DATABASE_URL", "sqlite:///:memory:")
DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=0)}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # A file, not memory: tests close connections and race threads against it.
    DATABASES["default"]["TEST"] = {
        "NAME": os.path.join(tempfile.gettempdir(), f"idempotency-tests-{os.getpid()}.sqlite3")
    }
elif DATABASES["default"]["ENGINE"] == "django.db.backends.mysql":
    # What docs/installation.rst recommends: READ COMMITTED (each statement sees
    # what has committed), strict mode, utf8mb4 and a UTC session clock, so that
    # Django's Now() (the outbox's) agrees with the store's UTC_TIMESTAMP().
    DATABASES["default"]["OPTIONS"] = {
        "charset": "utf8mb4",
        "isolation_level": os.environ.get("IDEMPOTENCY_TEST_MYSQL_ISOLATION", "read committed"),
        "init_command": "SET sql_mode = 'STRICT_TRANS_TABLES', time_zone = '+00:00'",
    }
    DATABASES["default"]["TEST"] = {"CHARSET": "utf8mb4", "COLLATION": "utf8mb4_unicode_ci"}

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15")
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "replay": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": REDIS_URL,
        "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 0.5, "SOCKET_TIMEOUT": 0.5},
    },
}

# Django's advice for test suites: a fast hasher. The default PBKDF2 (a million rounds)
# defends stored passwords, which nothing here is about; every create_user, login and
# admin_client paid it: half the CPU of the admin's and the access tests (issue 43).
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
}

if django.VERSION >= (6, 1):
    # Django 6.1 deprecates the implicit default mailer (warnings are errors here).
    MAILERS = {"default": {"BACKEND": "django.core.mail.backends.locmem.EmailBackend"}}

CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/14")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"null": {"class": "logging.NullHandler"}},
    "loggers": {"django.request": {"handlers": ["null"], "propagate": False}},
}

# The sample project's webhook (sample_project.payments.webhooks) signs with this.
WEBHOOK_SECRET = "tests-webhook-secret"
