# Added at the end of the settings.py that `django-admin startproject` wrote.

INSTALLED_APPS += [
    "idempotency_django",
    "payments",
]

# Development on SQLite: writers queue for the lock instead of failing
# ("database is locked") when two requests race.
DATABASES["default"]["OPTIONS"] = {"transaction_mode": "IMMEDIATE", "timeout": 20}
