# Added at the end of the settings.py that `django-admin startproject` wrote.

INSTALLED_APPS += [
    "idempotency_django",
    "payments",
]

# SQLite (development, a first try): writers queue for the lock instead of failing
# ("database is locked") when two requests race. These options are SQLite's alone:
# PostgreSQL and MariaDB refuse them (system check idempotency_django.E085).
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["OPTIONS"] = {"transaction_mode": "IMMEDIATE", "timeout": 20}
