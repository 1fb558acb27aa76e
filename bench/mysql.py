"""``python -m bench.mysql``: the "lease" protocol's added latency on MySQL/MariaDB, and its floor.

In-process (Django's test client, persistent connection, no middleware), on a
scratch database of its own (``idem_bench_mysql_<pid>``, created and dropped
here) of the server ``BENCH_MARIADB_URL`` names (default
``mysql://root@127.0.0.1:3306/idempotency``; the database it names is never
touched). Interleaved, sample by sample:

- ``reference``: the view unprotected (its one INSERT in ``atomic()``);
- ``lease``: the same view protected, a new key each time (claim, row lock,
  record, commit);
- ``replay``: a key already answered;
- ``floor``: with MySQLdb alone, the least "lease" must add around the business
  transaction: the claim INSERT committed on its own, and the UPDATE that
  records the answer inside the business transaction.

Printed: median and p95 per row, the added latency (``lease`` - ``reference``)
and that over the floor.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

DEFAULT_URL = "mysql://root@127.0.0.1:3306/idempotency"
BODY = json.dumps({"amount": 100})


def _connect(url: str, database: str | None = None) -> Any:
    import MySQLdb

    parts = urlsplit(url)
    options: dict[str, Any] = {
        "host": parts.hostname or "127.0.0.1",
        "port": parts.port or 3306,
        "user": parts.username or "root",
        "passwd": parts.password or "",
        "charset": "utf8mb4",
    }
    if database:
        options["database"] = database
    return MySQLdb.connect(**options)


@contextmanager
def scratch_database(url: str) -> Iterator[str]:
    name = f"idem_bench_mysql_{os.getpid()}"
    admin = _connect(url)
    try:
        admin.cursor().execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
        yield name
    finally:
        admin.cursor().execute(f"DROP DATABASE IF EXISTS `{name}`")
        admin.close()


def configure(url: str, database: str) -> None:
    import django
    from django.conf import settings

    parts = urlsplit(url)
    settings.configure(
        SECRET_KEY="bench-only-not-secret",
        USE_TZ=True,
        TIME_ZONE="UTC",
        ALLOWED_HOSTS=["*"],
        ROOT_URLCONF="bench.mysql",
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        INSTALLED_APPS=[
            "django.contrib.auth",
            "django.contrib.contenttypes",
            "idempotency_django",
            "tests.testapp",
        ],
        MIDDLEWARE=[],
        SILENCED_SYSTEM_CHECKS=["models.W037"],
        DATABASES={
            "default": {
                "ENGINE": "django.db.backends.mysql",
                "NAME": database,
                "USER": parts.username or "root",
                "PASSWORD": parts.password or "",
                "HOST": parts.hostname or "127.0.0.1",
                "PORT": str(parts.port or 3306),
                "CONN_MAX_AGE": 600,
                "OPTIONS": {
                    "charset": "utf8mb4",
                    "isolation_level": "read committed",
                    "init_command": "SET sql_mode = 'STRICT_TRANS_TABLES', time_zone = '+00:00'",
                },
            }
        },
    )
    django.setup()


def _urls() -> list[Any]:
    from django.urls import path

    from idempotency_django import idempotent
    from tests.testapp.views import make_charge

    def reference(request: Any) -> Any:
        from django.db import transaction

        with transaction.atomic():
            return make_charge(request)

    return [
        path("reference/", reference),
        path("lease/", idempotent(protocol="lease")(make_charge)),
    ]


urlpatterns: list[Any] = []


def _post(client: Any, path: str, key: str | None) -> Callable[[], None]:
    headers = {} if key is None else {"Idempotency-Key": key}

    def send() -> None:
        response = client.post(path, BODY, content_type="application/json", headers=headers)
        assert response.status_code == 201, response.content

    return send


def _timed(work: Callable[[], None]) -> float:
    started = time.perf_counter()
    work()
    return (time.perf_counter() - started) * 1000


def _floor(conn: Any) -> Callable[[], float]:
    """The claim committed alone, then the UPDATE inside a business transaction (timed apart)."""
    cursor = conn.cursor()

    def once() -> float:
        key = str(uuid.uuid4())
        started = time.perf_counter()
        conn.autocommit(True)
        cursor.execute("INSERT INTO bench_floor (tenant, `key`) VALUES ('', %s)", [key])
        claim = time.perf_counter() - started
        conn.autocommit(False)
        cursor.execute("INSERT INTO bench_floor_charge (reference, amount) VALUES (%s, 100)", [key])
        started = time.perf_counter()
        cursor.execute(
            "UPDATE bench_floor SET answer = 201 WHERE tenant = '' AND `key` = %s", [key]
        )
        record = time.perf_counter() - started
        conn.commit()
        return (claim + record) * 1000

    return once


_FLOOR_TABLES = (
    "CREATE TABLE bench_floor (id bigint AUTO_INCREMENT PRIMARY KEY, tenant varchar(255) "
    "NOT NULL, `key` varchar(255) NOT NULL, answer integer, UNIQUE (tenant, `key`)) ENGINE=InnoDB",
    "CREATE TABLE bench_floor_charge (id bigint AUTO_INCREMENT PRIMARY KEY, reference "
    "varchar(255) NOT NULL, amount integer NOT NULL, INDEX (reference)) ENGINE=InnoDB",
)


def measure(url: str, database: str, samples: int, warmup: int) -> dict[str, list[float]]:
    from django.core.management import call_command
    from django.test import Client

    call_command("migrate", verbosity=0)
    # The URLconf is this module as imported (not ``__main__``, under ``python -m``).
    importlib.import_module("bench.mysql").urlpatterns[:] = _urls()
    client = Client()
    replayed = str(uuid.uuid4())
    _post(client, "/lease/", replayed)()
    raw = _connect(url, database)
    for statement in _FLOOR_TABLES:
        raw.cursor().execute(statement)
    floor = _floor(raw)
    series: dict[str, list[float]] = {"reference": [], "lease": [], "replay": [], "floor": []}
    for index in range(warmup + samples):
        row = {
            "reference": _timed(_post(client, "/reference/", None)),
            "lease": _timed(_post(client, "/lease/", str(uuid.uuid4()))),
            "replay": _timed(_post(client, "/lease/", replayed)),
            "floor": floor(),
        }
        if index >= warmup:
            for name, value in row.items():
                series[name].append(value)
    raw.close()
    return series


def _p95(values: list[float]) -> float:
    return sorted(values)[max(0, round(0.95 * len(values)) - 1)]


def report(series: dict[str, list[float]], server: str) -> str:
    lines = [f"idempotency_django on {server}: lease, in-process, {len(series['lease'])} samples"]
    lines.append(f"{'':12} {'median ms':>10} {'p95 ms':>10}")
    for name, values in series.items():
        lines.append(f"{name:12} {statistics.median(values):10.3f} {_p95(values):10.3f}")
    added = statistics.median(series["lease"]) - statistics.median(series["reference"])
    floor = statistics.median(series["floor"])
    lines.append(f"added latency (lease - reference, medians): {added:.3f} ms")
    lines.append(f"floor (claim + record, MySQLdb alone): {floor:.3f} ms")
    lines.append(f"added latency over its floor: {added - floor:+.3f} ms ({added / floor:.1f}x)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    args = parser.parse_args(argv)
    url = os.environ.get("BENCH_MARIADB_URL", DEFAULT_URL)
    with scratch_database(url) as database:
        configure(url, database)
        from django.db import connection

        series = measure(url, database, args.samples, args.warmup)
        with connection.cursor() as cursor:
            cursor.execute("SELECT VERSION()")
            server = str(cursor.fetchone()[0])
        connection.close()
    print(report(series, server))


if __name__ == "__main__":
    main()
