"""The sample project as the chaos tier serves it under gunicorn.

Its own settings, with three changes: the URLs gain a slow twin of ``POST
/charges/`` (``bench.chaos_urls``), the lease comes from ``IDEMPOTENCY_LEASE``
so a killed worker's claim frees within a test, and every database connection
is named after its worker so pg_stat_activity tells which worker holds which
transaction.
"""

from __future__ import annotations

import os

from sample_project.settings import *  # noqa: F403
from sample_project.settings import DATABASES

ROOT_URLCONF = "bench.chaos_urls"
DEBUG = False
IDEMPOTENCY_LEASE = int(os.environ.get("IDEMPOTENCY_LEASE", "60"))

# Read in each gunicorn worker after its fork: os.getpid() is the worker's.
DATABASES["default"].setdefault("OPTIONS", {})["application_name"] = f"idem_sys:{os.getpid()}"
