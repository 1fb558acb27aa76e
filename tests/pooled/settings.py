"""The pooler tier: the race, crash and wait tests through a connection pooler.

``IDEMPOTENCY_TEST_POOLER=pgbouncer``: every connection goes through PgBouncer in
transaction pooling mode (``tests/services/pgbouncer.sh start``, port
``PGBOUNCER_PORT``, default 6432) in front of ``DATABASE_URL``'s server.
``IDEMPOTENCY_TEST_POOLER=psycopg``: Django's native pool (``OPTIONS["pool"]``).
"""

from __future__ import annotations

import os

from tests.settings import *  # noqa: F403
from tests.settings import DATABASES

POOLER = os.environ.get("IDEMPOTENCY_TEST_POOLER", "pgbouncer")
if POOLER not in ("pgbouncer", "psycopg"):
    raise ValueError(f'IDEMPOTENCY_TEST_POOLER must be "pgbouncer" or "psycopg", got {POOLER!r}')
if not DATABASES["default"]["ENGINE"].endswith("postgresql"):
    raise ValueError("The pooler tier needs DATABASE_URL to name a PostgreSQL database.")

_default = DATABASES["default"]
_options = dict(_default.get("OPTIONS") or {})
if POOLER == "pgbouncer":
    _default["HOST"] = "127.0.0.1"
    _default["PORT"] = int(os.environ.get("PGBOUNCER_PORT", "6432"))
    # Transaction pooling: no server-side cursors (they live in one server session),
    # and no prepared statements (PgBouncer 1.18 does not carry them across server
    # connections; Django's own default, stated here so that the tier proves it).
    _default["DISABLE_SERVER_SIDE_CURSORS"] = True
    _options["prepare_threshold"] = None
    # Its own test database: dropping it must not race the direct tier's.
    _default["TEST"] = {"NAME": f"test_{_default['NAME']}_pgbouncer"}
else:
    # Enough for the 16-thread storms plus the test's own connection; a checkout
    # waits longer than any IDEMPOTENCY_WAIT the tests use (W060).
    _options["pool"] = {"min_size": 2, "max_size": 24, "timeout": 60}
    _default["TEST"] = {"NAME": f"test_{_default['NAME']}_pool"}
_default["OPTIONS"] = _options
