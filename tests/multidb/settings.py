"""The multi-database tier: two shards behind a tenant router, and a lagging replica.

``pytest --ds tests.multidb.settings tests/multidb`` (SQLite files, or PostgreSQL
databases ``<name>_shard1`` and ``<name>_replica`` beside ``DATABASE_URL``'s).
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from tests.settings import *  # noqa: F403
from tests.settings import DATABASES, MIDDLEWARE


def _sibling(suffix: str) -> Any:
    base = DATABASES["default"]
    if base["ENGINE"] == "django.db.backends.sqlite3":
        name = os.path.join(tempfile.gettempdir(), f"idempotency-{suffix}-{os.getpid()}.sqlite3")
        return {**base, "NAME": name, "TEST": {"NAME": name}}
    return {**base, "NAME": f"{base['NAME']}_{suffix}", "TEST": {}}


DATABASES = {"default": DATABASES["default"], "shard1": _sibling("shard1")}
# A replica that never catches up: a separate database, read through by ReplicaRouter.
DATABASES["replica"] = _sibling("replica")
DATABASE_ROUTERS = ["tests.multidb.routing.TenantRouter"]
ROOT_URLCONF = "tests.multidb.urls"
MIDDLEWARE = [*MIDDLEWARE, "tests.multidb.routing.tenant_middleware"]
IDEMPOTENCY_TENANT_RESOLVER = "tests.multidb.routing.tenant"
IDEMPOTENCY_DATABASE = "tests.multidb.routing.shard"
