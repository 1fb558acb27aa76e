"""The sample project as the system tier (and ``make stress``) serves it under gunicorn.

Its own settings, with four changes: the URLs gain a slow twin of ``POST
/charges/`` (``tests.system.served_urls``), the lease comes from
``IDEMPOTENCY_LEASE`` so a killed worker's claim frees within a test, every
database connection is named after its worker so pg_stat_activity tells which
worker holds which transaction, and ``IDEMPOTENCY_PROTOCOL``, when set, chooses
the protocol: the system tier runs every scenario under "lock" and "lease"
(issue 10), each against a server of its own.
"""

from __future__ import annotations

import os

from sample_project.settings import *  # noqa: F403
from sample_project.settings import DATABASES

ROOT_URLCONF = "tests.system.served_urls"
DEBUG = False
IDEMPOTENCY_LEASE = int(os.environ.get("IDEMPOTENCY_LEASE", "60"))
if os.environ.get("IDEMPOTENCY_PROTOCOL"):
    IDEMPOTENCY_PROTOCOL = os.environ["IDEMPOTENCY_PROTOCOL"]

# Read in each gunicorn worker after its fork: os.getpid() is the worker's.
DATABASES["default"].setdefault("OPTIONS", {})["application_name"] = f"idem_sys:{os.getpid()}"
