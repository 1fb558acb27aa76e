"""A project sharded by tenant: tenants ``a-*`` live in ``default``, ``b-*`` in ``shard1``."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from django.db import models
from django.http import HttpRequest, HttpResponse

SHARDS = ("default", "shard1")
_tenant: ContextVar[str | None] = ContextVar("test_tenant", default=None)


def shard_of(tenant: str) -> str:
    return "shard1" if tenant.startswith("b") else "default"


def tenant(request: HttpRequest) -> str:
    return request.headers.get("X-Tenant", "")


def shard(request: HttpRequest) -> str:
    """``IDEMPOTENCY_DATABASE``: the entry lives beside its tenant's business rows."""
    return shard_of(tenant(request))


def tenant_middleware(get_response: Callable[[HttpRequest], HttpResponse]) -> Any:
    def middleware(request: HttpRequest) -> HttpResponse:
        token = _tenant.set(tenant(request) or None)
        try:
            return get_response(request)
        finally:
            _tenant.reset(token)

    return middleware


class TenantRouter:
    """Business rows (the test app's) go to the current tenant's shard."""

    def db_for_read(self, model: type[models.Model], **hints: Any) -> str | None:
        return self.db_for_write(model, **hints)

    def db_for_write(self, model: type[models.Model], **hints: Any) -> str | None:
        current = _tenant.get()
        if model._meta.app_label != "testapp" or current is None:
            return None
        return shard_of(current)

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool | None:
        return None


class ReplicaRouter:
    """Reads from ``replica`` (a stand-in that never catches up), writes to ``default``."""

    def db_for_read(self, model: type[models.Model], **hints: Any) -> str:
        return "replica"

    def db_for_write(self, model: type[models.Model], **hints: Any) -> str:
        return "default"

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool:
        return True
