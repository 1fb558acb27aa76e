"""The admin's overview on ten million entries, beside the entries' changelist.

``DATABASE_URL=postgres://…/idem_NAME python -m bench.overview [--rows N] [--loads N] [--keep]``

Unlike the other benchmarks this one works in the database ``DATABASE_URL`` names
(migrated here): loading ten million rows takes minutes, so ``--keep`` leaves them
for a next run, which then loads nothing. Without ``--keep`` the rows are deleted
(``TRUNCATE``) at the end. Not part of the test suite.

The rows, loaded by one ``INSERT … SELECT generate_series``: created evenly over the
last 25 hours (ids growing with time, as claims insert them), expiring a day later (the
oldest hour's expired, waiting for the purge), 97% completed (200, 201), 3% failed for
good (404, 422), the newest 100 in flight; 5,000 tenants. Then ``ANALYZE``. Each page is loaded ``--loads`` times, alternately, by a
logged-in superuser through Django's test client: the median, the range, and the
queries of one load (``BENCH_SHOW_QUERIES=1``: each query of the last loads, timed).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

import dj_database_url
import django
from django.conf import settings

FILL = """
INSERT INTO idempotency_django_idempotencyentry
    (tenant, key, fingerprint, status, owner, response_status, response_reason,
     response_headers, response_body, locked_until, created_at, expires_at)
SELECT 'user:' || (g %% 5000), md5(g::text), repeat('0', 64),
       CASE WHEN g > %(rows)s * 0.99999 THEN 'in_progress'
            WHEN g %% 100 < 3 THEN 'failed_final' ELSE 'completed' END,
       gen_random_uuid(),
       CASE WHEN g > %(rows)s * 0.99999 THEN NULL
            WHEN g %% 100 < 3 THEN (ARRAY[404, 422])[1 + g %% 2]
            ELSE (ARRAY[200, 201])[1 + g %% 2] END,
       '', '[]'::jsonb, CASE WHEN g > %(rows)s * 0.99999 THEN NULL ELSE '\\x7b7d'::bytea END,
       t + interval '60 seconds', t, t + interval '1 day'
FROM generate_series(1, %(rows)s) AS g,
     LATERAL (SELECT now() - interval '25 hours' + g * (interval '25 hours' / %(rows)s)) AS at(t)
"""


def configure(url: str) -> None:
    settings.configure(
        SECRET_KEY="bench-only-not-secret",
        DEBUG=False,
        USE_TZ=True,
        TIME_ZONE="UTC",
        ALLOWED_HOSTS=["*"],
        ROOT_URLCONF=__name__,
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        DATABASES={"default": dj_database_url.parse(url)},
        INSTALLED_APPS=[
            "django.contrib.auth",
            "django.contrib.contenttypes",
            "django.contrib.sessions",
            "django.contrib.messages",
            "django.contrib.admin",
            "idempotency_django",
            "idempotency_django.outbox",
        ],
        MIDDLEWARE=[
            "django.contrib.sessions.middleware.SessionMiddleware",
            "django.contrib.auth.middleware.AuthenticationMiddleware",
            "django.contrib.messages.middleware.MessageMiddleware",
        ],
        TEMPLATES=[
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
        ],
        PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"],
    )
    django.setup()


def urls() -> list[Any]:
    from django.contrib import admin
    from django.urls import path

    return [path("admin/", admin.site.urls)]


def fill(rows: int) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM (SELECT 1 FROM idempotency_django_idempotencyentry LIMIT %s) s",
            [rows],
        )
        if cursor.fetchone()[0] >= rows:
            print(f"{rows:,} rows already there (--keep of an earlier run)")
            return
        cursor.execute("TRUNCATE idempotency_django_idempotencyentry RESTART IDENTITY")
        started = time.monotonic()
        cursor.execute(FILL, {"rows": rows})
        cursor.execute("ANALYZE idempotency_django_idempotencyentry")
        print(f"loaded {rows:,} rows in {time.monotonic() - started:.0f} s")


def measure(path: str, show: bool = False) -> tuple[float, int]:
    """One load of ``path`` by a logged-in superuser: its time and its queries."""
    from django.contrib.auth.models import User
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    user, _ = User.objects.get_or_create(
        username="bench-admin", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client()
    client.force_login(user)
    with CaptureQueriesContext(connection) as queries:
        started = time.perf_counter()
        assert client.get(path).status_code == 200
        took = time.perf_counter() - started
    for query in queries if show else []:
        print(f"  {float(query['time']) * 1000:8.1f} ms  {query['sql'][:140]}")
    return took, len(queries)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--loads", type=int, default=7)
    parser.add_argument("--keep", action="store_true", help="leave the rows for a next run")
    options = parser.parse_args()
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        sys.exit("DATABASE_URL must name a PostgreSQL database (it is filled, then emptied)")
    configure(url)
    global urlpatterns
    urlpatterns = urls()
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    fill(options.rows)
    pages = {
        "changelist": "/admin/idempotency_django/idempotencyentry/",
        "overview": "/admin/idempotency_django/idempotencyentry/overview/",
    }
    results: dict[str, list[float]] = {name: [] for name in pages}
    counts: dict[str, int] = {}
    for load in range(options.loads):  # alternately, so the machine's load weighs on both
        for name, path in pages.items():
            show = load == options.loads - 1 and bool(os.environ.get("BENCH_SHOW_QUERIES"))
            took, counts[name] = measure(path, show)
            results[name].append(took)
    for name, times in results.items():
        ms = sorted(t * 1000 for t in times)
        print(
            f"{name:>10}: median {statistics.median(ms):7.1f} ms "
            f"(min {ms[0]:.1f}, max {ms[-1]:.1f}; {len(ms)} loads), {counts[name]} queries"
        )
    if not options.keep:
        with connection.cursor() as cursor:
            cursor.execute("TRUNCATE idempotency_django_idempotencyentry")
        print("rows deleted (TRUNCATE)")


urlpatterns: list[Any] = []

if __name__ == "__main__":
    main()
