"""Markers, service gating and shared fixtures.

A test that needs a service the machine lacks is skipped with the reason, except
when services are required (``CI=true``, or ``IDEMPOTENCY_TEST_SERVICES=required``
as ``make test`` sets it), where it fails: a full run must prove the guarantees,
not skip them. The services and variables: docs/contributing.rst.

A test runs where it proves something: one that needs no database (no ``django_db``
mark, no database fixture) runs once, in the SQLite pass; the server passes
(``IDEMPOTENCY_TEST_DATABASE_ONLY=1``) deselect it. One whose outcome depends on the
configured database without touching it says so with ``every_database``. A stack's
face (``faces``) runs under each protocol once: "lease" on SQLite, "lock" on
PostgreSQL; MariaDB's pass, "lease" again, leaves it out unless it needs MySQL. The
inserting claim's pass leaves out "lease" cases: that claim form is "lock"'s. pytest-django
refuses a query from a test without its mark, and the vendor fixtures below refuse such
a test too: neither can silently run in one pass only.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.db import connection, connections
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

# A property holds or not whatever the machine's speed: no per-example deadline (200 ms
# by default) and no "too slow" health check, which fail a busy machine's run, not a bug.
hypothesis_settings.register_profile(
    "suite", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
hypothesis_settings.load_profile("suite")

IN_CI = os.environ.get("CI", "").lower() == "true"
SERVICES = os.environ.get("IDEMPOTENCY_TEST_SERVICES", "required" if IN_CI else "optional")
if SERVICES not in ("required", "optional"):
    raise pytest.UsageError(
        f'IDEMPOTENCY_TEST_SERVICES must be "required" or "optional", got {SERVICES!r}.'
    )
SERVICES_REQUIRED = IN_CI or SERVICES == "required"
_WHY_FAIL = "services are required (CI=true or IDEMPOTENCY_TEST_SERVICES=required)"


def service_missing(reason: str) -> None:
    """Skip, or fail when services are required, because a service isn't there."""
    if SERVICES_REQUIRED:
        pytest.fail(f"{reason}: {_WHY_FAIL}")
    pytest.skip(reason)


def reachable(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=0.5).close()
    except OSError:
        return False
    return True


# "inserting" runs everything with the lock protocol's inserting claim (0.2.0's, still
# used in a caller's transaction or above READ COMMITTED) where the read-only one
# would run: both claim forms must pass every race, crash and state-machine proof.
CLAIM_FORM = os.environ.get("IDEMPOTENCY_TEST_CLAIM", "read-only")
if CLAIM_FORM not in ("read-only", "inserting"):
    raise pytest.UsageError(
        f'IDEMPOTENCY_TEST_CLAIM must be "read-only" or "inserting", got {CLAIM_FORM!r}.'
    )


@pytest.fixture(autouse=True, scope="session")
def _claim_form() -> None:
    from idempotency_django._storage.store import readonly

    readonly.ENABLED = CLAIM_FORM == "read-only"


def pytest_configure(config: pytest.Config) -> None:
    from tests import flush

    flush.install()
    for marker in (
        "requires_postgres: runs only when DATABASE_URL points at PostgreSQL",
        "requires_mysql: runs only when DATABASE_URL points at MySQL or MariaDB",
        "requires_server: needs a server's row locks and connections (PostgreSQL, MySQL)",
        "requires_redis: needs the Redis server of REDIS_URL",
        "system: starts real servers (gunicorn, Celery workers)",
        "pooler(name): runs only in that pass of the pooler tier (tests/pooled: pgbouncer, psycopg)",
        "packaging: builds the wheel and sdist, installs them in new virtualenvs (needs PyPI)",
        "versions: runs in the tox corners (make tox-corners): imports, an adapter, a smoke of "
        "each protocol, what a Python or Django version can change",
        "every_database: needs no database fixture, but its outcome depends on the configured "
        "database: it runs in every database's pass",
        "faces: a stack's face over the protocol (DRF, Ninja, GraphQL, MCP, forms, the admin, "
        "the switch, the sample's pages): runs under lease (SQLite) and lock (PostgreSQL), "
        "not again in MariaDB's pass (lease, as on SQLite) unless it needs MySQL itself",
    ):
        config.addinivalue_line("markers", marker)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # A database's own tests belong to its pass of `make test`: on the other
    # databases they are deselected, not skipped.
    if _SKIP_ALL in config.stash:
        for item in items:
            item.add_marker(pytest.mark.skip(reason=config.stash[_SKIP_ALL]))
        return
    vendor = database_vendor()
    wrong = {marker for marker, vendors in _FOR_VENDORS.items() if vendor not in vendors}
    keep = [item for item in items if not wrong.intersection(item.keywords)]
    if DATABASE_ONLY:
        keep = [item for item in keep if concerns_a_database(item)]
        if vendor == "mysql":
            keep = [item for item in keep if not _a_face_proven_elsewhere(item)]
    if CLAIM_FORM == "inserting":
        keep = [item for item in keep if not _under_lease(item)]
    deselected = [item for item in items if item not in keep]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = keep


DATABASE_ONLY = os.environ.get("IDEMPOTENCY_TEST_DATABASE_ONLY") == "1"
_DATABASE_FIXTURES = frozenset(
    {"db", "transactional_db", "django_db_reset_sequences", "django_db_serialized_rollback"}
)
_DATABASE_MARKS = (
    "django_db",
    "every_database",
    "system",
    "pooler",
    "requires_postgres",
    "requires_mysql",
    "requires_server",
)


def concerns_a_database(item: pytest.Item) -> bool:
    """Whether the configured database can change ``item``'s outcome (see the module doc)."""
    if any(item.get_closest_marker(mark) for mark in _DATABASE_MARKS):
        return True
    return bool(_DATABASE_FIXTURES.intersection(getattr(item, "fixturenames", ())))


def _a_face_proven_elsewhere(item: pytest.Item) -> bool:
    """A ``faces`` test in MariaDB's pass: its protocol ("lease") already ran under it on
    SQLite, and the protocol's SQL, races and crashes run on MariaDB in their own tests."""
    if item.get_closest_marker("faces") is None:
        return False
    own = ("requires_mysql", "requires_server")
    if any(item.get_closest_marker(mark) for mark in own):
        return False
    return "is_mysql" not in getattr(item, "fixturenames", ())


def _under_lease(item: pytest.Item) -> bool:
    """A "lease" case in the inserting claim's pass: the read-only claim is "lock"'s only
    (``_storage/store/readonly.py``), so a lease case there repeats the main pass."""
    callspec = getattr(item, "callspec", None)
    return callspec is not None and callspec.params.get("protocol") == "lease"


_FOR_VENDORS = {
    "requires_postgres": {"postgresql"},
    "requires_mysql": {"mysql"},
    "requires_server": {"postgresql", "mysql"},
}
_SERVERS = {"postgresql": ("PostgreSQL", 5432), "mysql": ("MySQL/MariaDB", 3306)}


def database_vendor() -> str:
    """``postgresql``, ``mysql`` or ``sqlite``: the test settings' default database."""
    from django.conf import settings

    engine = str(settings.DATABASES["default"]["ENGINE"])
    return next((vendor for vendor in _SERVERS if engine.endswith(vendor)), "sqlite")


def pytest_sessionstart(session: pytest.Session) -> None:
    from django.conf import settings

    _check_installed_package()

    db = settings.DATABASES["default"]
    vendor = database_vendor()
    if vendor not in _SERVERS:
        return
    name, port = _SERVERS[vendor]
    address = (db.get("HOST") or "127.0.0.1", int(db.get("PORT") or port))
    if not reachable(*address):
        reason = f"{name} at {address[0]}:{address[1]} is unreachable"
        if SERVICES_REQUIRED:
            pytest.exit(f"{reason}: {_WHY_FAIL}", returncode=1)
        session.config.stash[_SKIP_ALL] = reason


_SKIP_ALL = pytest.StashKey[str]()


def _check_installed_package() -> None:
    """Under tox, the wheel is what is tested: never a source tree that happens to be on the path."""
    import idempotency_django

    location = idempotency_django.__file__ or ""
    if os.environ.get("IDEMPOTENCY_TEST_INSTALLED") == "1" and "site-packages" not in location:
        pytest.exit(f"testing {location}, not the installed wheel", returncode=1)


@pytest.fixture
def redis_url() -> str:
    from django.conf import settings

    url = str(settings.REDIS_URL)
    address = urlsplit(url)
    if not reachable(address.hostname or "127.0.0.1", address.port or 6379):
        service_missing(f"Redis at {url} (REDIS_URL) is unreachable")
    return url


def _vendor_for(request: pytest.FixtureRequest) -> str:
    """The vendor, for a test that runs in each database's pass (else it would run in one)."""
    if not concerns_a_database(request.node):
        pytest.fail(
            f"{request.node.nodeid} asks which database runs it, but has no django_db or "
            "every_database mark: the server passes would never run it"
        )
    return connection.vendor


@pytest.fixture
def is_postgres(request: pytest.FixtureRequest) -> bool:
    return _vendor_for(request) == "postgresql"


@pytest.fixture
def is_mysql(request: pytest.FixtureRequest) -> bool:
    return _vendor_for(request) == "mysql"


def close_connections_after(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a thread's work so its database connections close when it ends."""

    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        finally:
            connections.close_all()

    return run


@pytest.fixture(autouse=True)
def _watchers_closed() -> Iterator[None]:
    """The side connections a test watched PostgreSQL through (tests/lock_helpers.py)."""
    yield
    helpers = sys.modules.get("tests.lock_helpers")
    if helpers is not None:
        helpers.close_watchers()


@pytest.fixture(autouse=True)
def _outbox_fast_path_not_paused() -> Iterator[None]:
    """A test whose broker failed must not leave the next test's fast path paused."""
    yield
    from idempotency_django.outbox import delivery

    delivery._paused_until[0] = 0.0
