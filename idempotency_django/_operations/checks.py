"""One system check per setting, each with its own stable id."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from django.utils.module_loading import import_string

from idempotency_django._conf import MAX_TTL, MAX_WAIT, as_timedelta, bounded
from idempotency_django.databases import entries_aliases

# RFC 9110 token: the characters a header field name may contain.
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_MAX_KEY_COLUMN = 255
_MISSING = object()


def _setting(name: str) -> Any:
    return getattr(settings, name, _MISSING)


def _error(check_id: str, msg: str, hint: str) -> list[CheckMessage]:
    return [Error(msg, hint=hint, id=f"idempotency_django.{check_id}")]


def check_header(value: Any) -> list[CheckMessage]:
    if isinstance(value, str) and _TOKEN.match(value):
        return []
    return _error(
        "E001",
        f"IDEMPOTENCY_HEADER must be a header name, got {value!r}.",
        'Use a token such as "Idempotency-Key".',
    )


def check_required(value: Any) -> list[CheckMessage]:
    if isinstance(value, bool):
        return []
    return _error(
        "E002", f"IDEMPOTENCY_REQUIRED must be a bool, got {value!r}.", "Set it to True or False."
    )


def _within(value: Any, maximum: timedelta = MAX_TTL, *, zero: bool = False) -> bool:
    try:
        bounded(value, maximum, zero=zero)
    except (TypeError, ValueError):
        return False
    return True


def check_ttl(value: Any) -> list[CheckMessage]:
    if _within(value):
        return []
    return _error(
        "E003",
        f"IDEMPOTENCY_TTL must be a positive duration of at most 100 years, got {value!r}.",
        "Give seconds (e.g. 86400) or a datetime.timedelta.",
    )


def check_lease(value: Any) -> list[CheckMessage]:
    if _within(value):
        return []
    return _error(
        "E004",
        f"IDEMPOTENCY_LEASE must be a positive duration of at most 100 years, got {value!r}.",
        "Give seconds (e.g. 60) or a datetime.timedelta.",
    )


def check_lease_within_ttl(lease: Any, ttl: Any) -> list[CheckMessage]:
    if not (_within(lease) and _within(ttl)):
        return []
    if as_timedelta(lease) < as_timedelta(ttl):
        return []
    return _error(
        "E005",
        "IDEMPOTENCY_LEASE must be shorter than IDEMPOTENCY_TTL.",
        "An entry must outlive the claim that created it.",
    )


def check_tenant_resolver(value: Any) -> list[CheckMessage]:
    if callable(value):
        return []
    try:
        resolver = import_string(value)
    except (ImportError, TypeError, ValueError, AttributeError):
        resolver = None
    if callable(resolver):
        return []
    return _error(
        "E006",
        f"IDEMPOTENCY_TENANT_RESOLVER must be a callable or the dotted path of one, got {value!r}.",
        'For example "myproject.tenants.account_id", taking the request, returning a str.',
    )


def check_key_max_length(value: Any) -> list[CheckMessage]:
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= _MAX_KEY_COLUMN:
        return []
    return _error(
        "E007",
        f"IDEMPOTENCY_KEY_MAX_LENGTH must be an int from 1 to {_MAX_KEY_COLUMN}, got {value!r}.",
        f"The key column holds at most {_MAX_KEY_COLUMN} characters.",
    )


def check_database(value: Any) -> list[CheckMessage]:
    if callable(value) or (isinstance(value, str) and value in settings.DATABASES):
        return []
    if isinstance(value, str) and "." in value:
        try:
            if callable(import_string(value)):
                return []
        except ImportError:
            pass
        return _error(
            "E060",
            f"IDEMPOTENCY_DATABASE {value!r} is not an alias in DATABASES, and as a dotted "
            "path it does not import a callable.",
            "Give an alias, or the dotted path of a callable taking the request and "
            'returning an alias (e.g. "myproject.routing.entries_database").',
        )
    return _error(
        "E008",
        f"IDEMPOTENCY_DATABASE {value!r} is not an alias in DATABASES.",
        f"Use one of: {', '.join(settings.DATABASES)}, or a callable (request -> alias).",
    )


def check_wait_within_pool(alias: str, wait: Any, options: Any) -> list[CheckMessage]:
    """A waiter holds its connection: a pool whose checkout times out first fails others."""
    pool = options.get("pool") if isinstance(options, dict) else None
    if not pool or not _within(wait, MAX_WAIT, zero=True):
        return []
    seconds = as_timedelta(wait).total_seconds()
    timeout = float(pool.get("timeout", 30.0)) if isinstance(pool, dict) else 30.0
    if seconds == 0 or timeout > seconds:
        return []
    return [
        Warning(
            f"IDEMPOTENCY_WAIT is {seconds:g} s, but DATABASES[{alias!r}]'s connection pool "
            f"gives up on a checkout after {timeout:g} s: duplicates waiting on one key hold "
            "their connections that long, so a storm of them can make every other request "
            "fail with PoolTimeout before any waiter is done.",
            hint="Make OPTIONS['pool']['timeout'] longer than IDEMPOTENCY_WAIT, and size "
            "max_size for the waiters (docs/operations.rst, 'Pool sizing').",
            id="idempotency_django.W060",
        )
    ]


def check_cache(value: Any) -> list[CheckMessage]:
    if value is None or (isinstance(value, str) and value in settings.CACHES):
        return []
    return _error(
        "E009",
        f"IDEMPOTENCY_CACHE {value!r} is not an alias in CACHES.",
        "Set it to None or to the alias of a django-redis cache.",
    )


def check_error_format(value: Any) -> list[CheckMessage]:
    if value in ("problem", "drf"):
        return []
    return _error(
        "E010",
        f'IDEMPOTENCY_DRF_ERROR_FORMAT must be "problem" or "drf", got {value!r}.',
        '"drf" routes errors through REST_FRAMEWORK["EXCEPTION_HANDLER"].',
    )


def check_protocol(value: Any) -> list[CheckMessage]:
    if value is None or value in ("lock", "lease"):
        return []
    return _error(
        "E012",
        f'IDEMPOTENCY_PROTOCOL must be "lock", "lease" or None, got {value!r}.',
        'None picks "lock" on PostgreSQL and "lease" elsewhere.',
    )


def check_lock_needs_postgres(protocol: Any, alias: str, vendor: str) -> list[CheckMessage]:
    if protocol != "lock" or vendor == "postgresql":
        return []
    return _error(
        "E013",
        f'IDEMPOTENCY_PROTOCOL = "lock" needs PostgreSQL, but IDEMPOTENCY_DATABASE {alias!r} '
        f"is a {vendor} database.",
        'Use "lease" (or None, which picks it) on this database. MySQL and MariaDB have no '
        "transaction-scoped advisory lock; docs/protocols.rst explains why lease is their "
        "protocol.",
    )


def check_wait(value: Any) -> list[CheckMessage]:
    if _within(value, MAX_WAIT, zero=True):
        return []
    return _error(
        "E014",
        f"IDEMPOTENCY_WAIT must be zero or a positive duration of at most a day, got {value!r}.",
        "Give seconds (e.g. 5) or a datetime.timedelta; 0 answers 409 at once.",
    )


def check_idle_timeout(value: Any) -> list[CheckMessage]:
    if value is None or _within(value, MAX_WAIT):
        return []
    return _error(
        "E016",
        f"IDEMPOTENCY_IDLE_TIMEOUT must be a positive duration of at most a day, or None, "
        f"got {value!r}.",
        "Give seconds (e.g. 300) or a datetime.timedelta; None leaves PostgreSQL's own setting.",
    )


def check_prepared_statements(value: Any) -> list[CheckMessage]:
    if value is None or isinstance(value, bool):
        return []
    return _error(
        "E030",
        f"IDEMPOTENCY_PREPARED_STATEMENTS must be True, False or None, got {value!r}.",
        "None (the default) prepares them except on databases with "
        "DISABLE_SERVER_SIDE_CURSORS = True (a transaction-pooling PgBouncer).",
    )


def check_autocommit(alias: str, autocommit: Any) -> list[CheckMessage]:
    if autocommit is not False:
        return []
    return _error(
        "E015",
        f'DATABASES[{alias!r}]["AUTOCOMMIT"] is False on the database of idempotency entries.',
        "Without autocommit Django never commits for the view, so answers would go out with "
        "nothing committed. Keep AUTOCOMMIT on (the default) for IDEMPOTENCY_DATABASE.",
    )


_SUPPORTED_VENDORS = ("postgresql", "mysql", "sqlite")


def check_database_vendor(alias: str, vendor: str) -> list[CheckMessage]:
    if vendor in _SUPPORTED_VENDORS:
        return []
    return _error(
        "E011",
        f"IDEMPOTENCY_DATABASE {alias!r} is {_article(vendor)} {vendor} database, which "
        "idempotency_django does not support.",
        "Keep the entries on PostgreSQL, MySQL 8.0+ or MariaDB 10.6+ (or SQLite for "
        "development): set IDEMPOTENCY_DATABASE.",
    )


def _article(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"


def _entries_vendor() -> list[CheckMessage]:
    try:
        aliases = entries_aliases(None)  # a callable's: every alias that may hold entries
    except ImproperlyConfigured:
        return []  # E008 / E060 report it
    messages: list[CheckMessage] = []
    for alias in (a for a in aliases if a in settings.DATABASES):  # else E008 reports it
        driver = check_mysql_driver(alias, settings.DATABASES[alias].get("ENGINE", ""))
        if driver:
            messages += driver  # loading the backend would raise instead of reporting
            continue
        vendor = connections[alias].vendor
        messages += [
            *check_database_vendor(alias, vendor),
            *check_lock_needs_postgres(
                getattr(settings, "IDEMPOTENCY_PROTOCOL", None), alias, vendor
            ),
            *check_autocommit(alias, settings.DATABASES[alias].get("AUTOCOMMIT", True)),
            *check_wait_within_pool(
                alias,
                getattr(settings, "IDEMPOTENCY_WAIT", 0),
                settings.DATABASES[alias].get("OPTIONS"),
            ),
        ]
    return messages


def check_secret(value: Any) -> list[CheckMessage]:
    if value is None or (isinstance(value, str) and len(value) >= 32):
        return []
    return _error(
        "E020",
        "IDEMPOTENCY_SECRET must be None or a str of at least 32 characters.",
        "Generate one (django.core.management.utils.get_random_secret_key()) and never "
        "change it while retries can come; or remove it to keep the persisted secret.",
    )


def check_secret_fallbacks(value: Any) -> list[CheckMessage]:
    if isinstance(value, list | tuple) and all(isinstance(v, str) and v for v in value):
        return []
    return _error(
        "E021",
        f"IDEMPOTENCY_SECRET_FALLBACKS must be a list of non-empty str, got {value!r}.",
        "Newest first, the strings that were IDEMPOTENCY_SECRET (or SECRET_KEY) before: "
        "stored answers sealed under them still open until reseal_idempotency has run.",
    )


def check_encryption_keys(value: Any) -> list[CheckMessage]:
    from idempotency_django._storage.seal import DERIVED, decode_key

    problem = ""
    if not isinstance(value, list | tuple) or not value:
        problem = f"must be a non-empty list, got {value!r}"
    else:
        for position, entry in enumerate(value):
            if entry == DERIVED:
                continue
            try:
                decode_key(entry if isinstance(entry, str) else "")
            except ValueError as exc:
                problem = f"entry {position} is not a key ({exc})"
                break
    if not problem:
        return []
    return _error(
        "E120",
        f"IDEMPOTENCY_ENCRYPTION_KEYS {problem}.",
        'Newest first; each is "server-secret" (derived from the server secret) or 32 '
        "random bytes in urlsafe base64: `python manage.py reseal_idempotency --new-key` "
        "prints one. Keep an old key in the list until `reseal_idempotency` has run.",
    )


MAX_STORED_BYTES_LIMIT = 256 * 1024 * 1024


def check_max_stored_bytes(value: Any) -> list[CheckMessage]:
    if (
        isinstance(value, int)
        and not isinstance(value, bool)
        and 0 < value <= MAX_STORED_BYTES_LIMIT
    ):
        return []
    return _error(
        "E121",
        f"IDEMPOTENCY_MAX_STORED_BYTES must be an int from 1 to {MAX_STORED_BYTES_LIMIT}, "
        f"got {value!r}.",
        "The most a stored answer (headers and body) may take; the default is 1048576 "
        "(1 MiB). On MariaDB/MySQL keep it below the server's max_allowed_packet.",
    )


def check_redact(value: Any) -> list[CheckMessage]:
    from idempotency_django._protocol.redact import redactor

    try:
        redactor(import_string(value) if isinstance(value, str) else value)
    except (ImportError, TypeError, ValueError) as exc:
        return _error(
            "E122",
            f"IDEMPOTENCY_REDACT must be None, a callable (or its dotted path) or a list of "
            f"JSON field paths: {exc}",
            'E.g. IDEMPOTENCY_REDACT = ["token", "card.secret"], or '
            '"myapp.redaction.redact" taking the response and returning what to store.',
        )
    return []


def check_mysql_packet(alias: str, packet: int, limit: int) -> list[CheckMessage]:
    # The sealed answer, its statement and a margin must fit in one packet.
    if packet >= limit + 64 * 1024:
        return []
    return [
        Warning(
            f"IDEMPOTENCY_DATABASE {alias!r}: max_allowed_packet ({packet} bytes) is not above "
            f"IDEMPOTENCY_MAX_STORED_BYTES ({limit} bytes) plus 64 KiB.",
            hint="An answer near the bound would be refused by the server after the view ran "
            "(answered 500 answer-too-large, nothing committed). Raise max_allowed_packet, or "
            "lower IDEMPOTENCY_MAX_STORED_BYTES.",
            id="idempotency_django.W123",
        )
    ]


def check_mysql_driver(alias: str, engine: str) -> list[CheckMessage]:
    if not engine.endswith("mysql"):
        return []
    try:
        importlib.import_module("MySQLdb")
    except ImportError as exc:
        return _error(
            "E070",
            f"IDEMPOTENCY_DATABASE {alias!r} is MySQL or MariaDB, but its driver, mysqlclient, "
            f"cannot be imported ({exc}).",
            "pip install 'idempotency-django[mysql]'. Building mysqlclient needs pkg-config, a "
            "C compiler and the client headers: on Debian or Ubuntu `apt-get install "
            "pkg-config build-essential default-libmysqlclient-dev` (or libmariadb-dev); on "
            "Red Hat `dnf install pkgconf gcc mariadb-connector-c-devel` (or mysql-devel).",
        )
    return []


# The oldest servers with SELECT ... FOR UPDATE SKIP LOCKED (takeover and purge).
MYSQL_MIN, MARIADB_MIN = (8, 0, 1), (10, 6)


def check_mysql_version(alias: str, mariadb: bool, version: tuple[int, ...]) -> list[CheckMessage]:
    least = MARIADB_MIN if mariadb else MYSQL_MIN
    if version >= least:
        return []
    name = "MariaDB" if mariadb else "MySQL"
    return _error(
        "E071",
        f"IDEMPOTENCY_DATABASE {alias!r} runs {name} {'.'.join(map(str, version))}; "
        f"idempotency_django needs {name} {'.'.join(map(str, least))} or newer.",
        "Older servers lack SELECT ... FOR UPDATE SKIP LOCKED, which keeps a takeover or a "
        "purge off a request that is still running. Upgrade the server.",
    )


@register(Tags.database)
def check_mysql_server(
    app_configs: Iterable[Any] | None = None, databases: Iterable[str] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Run by ``migrate`` and ``check --database``: asks the server its version and clock."""
    alias = getattr(settings, "IDEMPOTENCY_DATABASE", "default")
    if not databases or alias not in databases or check_mysql_driver(alias, _engine(alias)):
        return []
    conn = connections[alias]
    if conn.vendor != "mysql":
        return []
    mariadb, version = conn.mysql_is_mariadb, conn.mysql_version  # type: ignore[attr-defined]
    with conn.cursor() as cursor:
        cursor.execute("SELECT TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(), NOW()), @@max_allowed_packet")
        offset, packet = (int(value) for value in cursor.fetchone())
    return [
        *check_mysql_version(alias, mariadb, version),
        *check_mysql_clock(alias, offset),
        *check_mysql_packet(alias, packet, _max_stored_bytes()),
    ]


def _max_stored_bytes() -> int:
    value = getattr(settings, "IDEMPOTENCY_MAX_STORED_BYTES", None)
    return value if isinstance(value, int) else 1024 * 1024


def check_mysql_clock(alias: str, offset: int) -> list[CheckMessage]:
    if abs(offset) < 60:
        return []
    return [
        Warning(
            f"The sessions of IDEMPOTENCY_DATABASE {alias!r} run {offset:+d} s from UTC "
            "(time_zone).",
            hint="The entries use UTC_TIMESTAMP() and are not affected, but Django's Now() "
            "(the outbox's relay, the admin's expired filter) follows the session's zone while "
            "Django stores UTC. Add \"SET time_zone = '+00:00'\" to OPTIONS['init_command'] "
            "(no time zone tables needed).",
            id="idempotency_django.W070",
        )
    ]


def check_open_legacy_rows(value: Any) -> list[CheckMessage]:
    if isinstance(value, bool):
        return []
    return _error(
        "E124",
        f"IDEMPOTENCY_OPEN_LEGACY_ROWS must be a bool, got {value!r}.",
        "Leave it out (False), or set it to True only until 0.4's and 0.3's stored answers "
        "expire; manage.py reseal_idempotency makes it unneeded.",
    )


def check_conformance_hooks(value: Any) -> list[CheckMessage]:
    if isinstance(value, bool):
        return []
    return _error(
        "E150",
        f"IDEMPOTENCY_CONFORMANCE_HOOKS must be a bool, got {value!r}.",
        "Set it to True on a test or staging deployment only, else leave it out.",
    )


def _engine(alias: Any) -> str:
    if not isinstance(alias, str) or alias not in settings.DATABASES:
        return ""
    return str(settings.DATABASES[alias].get("ENGINE", ""))


def check_outbox_max_attempts(value: Any) -> list[CheckMessage]:
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return []
    return _error(
        "E110",
        f"IDEMPOTENCY_OUTBOX_MAX_ATTEMPTS must be a positive int or None, got {value!r}.",
        "The failed publishes after which an outbox row is dead-lettered, e.g. 20; "
        "None retries for ever.",
    )


# What Django's SQLite backend takes from OPTIONS and no other backend does: psycopg refuses
# them ("invalid connection option"), mysqlclient too (TypeError), at the first connection.
SQLITE_ONLY_OPTIONS = ("transaction_mode", "timeout", "detect_types", "check_same_thread", "uri")
_REFUSING_ENGINES = {"postgresql": "PostgreSQL", "postgis": "PostgreSQL", "mysql": "MySQL/MariaDB"}


def check_sqlite_options(alias: str, engine: str, options: Any) -> list[CheckMessage]:
    """SQLite's options (the quick start's development snippet) on another database."""
    server = _REFUSING_ENGINES.get(engine.rpartition(".")[2])
    found = [name for name in SQLITE_ONLY_OPTIONS if isinstance(options, dict) and name in options]
    if server is None or not found:
        return []
    names = ", ".join(repr(name) for name in found)
    return _error(
        "E085",
        f"DATABASES[{alias!r}]['OPTIONS'] has SQLite's {names}, but {alias!r} is {server} "
        f"({engine}), which refuses them at its first connection.",
        "Remove them from this database's OPTIONS: they are SQLite's (the quick start sets "
        "them only when the ENGINE is django.db.backends.sqlite3).",
    )


@register(Tags.compatibility)
def check_database_options(
    app_configs: Iterable[Any] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Every alias's OPTIONS against its engine (``manage.py check`` would pass otherwise)."""
    messages: list[CheckMessage] = []
    for alias, database in settings.DATABASES.items():
        engine = str(database.get("ENGINE", ""))
        messages += check_sqlite_options(alias, engine, database.get("OPTIONS"))
    return messages


_SINGLE: Sequence[tuple[str, Callable[[Any], list[CheckMessage]]]] = (
    ("IDEMPOTENCY_HEADER", check_header),
    ("IDEMPOTENCY_REQUIRED", check_required),
    ("IDEMPOTENCY_TTL", check_ttl),
    ("IDEMPOTENCY_LEASE", check_lease),
    ("IDEMPOTENCY_TENANT_RESOLVER", check_tenant_resolver),
    ("IDEMPOTENCY_KEY_MAX_LENGTH", check_key_max_length),
    ("IDEMPOTENCY_DATABASE", check_database),
    ("IDEMPOTENCY_CACHE", check_cache),
    ("IDEMPOTENCY_DRF_ERROR_FORMAT", check_error_format),
    ("IDEMPOTENCY_PROTOCOL", check_protocol),
    ("IDEMPOTENCY_WAIT", check_wait),
    ("IDEMPOTENCY_IDLE_TIMEOUT", check_idle_timeout),
    ("IDEMPOTENCY_SECRET", check_secret),
    ("IDEMPOTENCY_SECRET_FALLBACKS", check_secret_fallbacks),
    ("IDEMPOTENCY_PREPARED_STATEMENTS", check_prepared_statements),
    ("IDEMPOTENCY_ENCRYPTION_KEYS", check_encryption_keys),
    ("IDEMPOTENCY_MAX_STORED_BYTES", check_max_stored_bytes),
    ("IDEMPOTENCY_REDACT", check_redact),
    ("IDEMPOTENCY_OPEN_LEGACY_ROWS", check_open_legacy_rows),
    ("IDEMPOTENCY_OUTBOX_MAX_ATTEMPTS", check_outbox_max_attempts),
    ("IDEMPOTENCY_CONFORMANCE_HOOKS", check_conformance_hooks),
)


@register(Tags.compatibility)
def check_settings(app_configs: Iterable[Any] | None = None, **kwargs: Any) -> list[CheckMessage]:
    """Validate every ``IDEMPOTENCY_*`` setting the project sets."""
    messages: list[CheckMessage] = []
    for name, check in _SINGLE:
        value = _setting(name)
        if value is not _MISSING:
            messages += check(value)
    messages += check_lease_within_ttl(
        getattr(settings, "IDEMPOTENCY_LEASE", 60), getattr(settings, "IDEMPOTENCY_TTL", 86400)
    )
    messages += _entries_vendor()
    return messages


_SESSION_MIDDLEWARE = "django.contrib.sessions.middleware.SessionMiddleware"
_IDEMPOTENCY_MIDDLEWARE = "idempotency_django.middleware.IdempotencyMiddleware"


@register(Tags.compatibility)
def check_form_sessions(
    app_configs: Iterable[Any] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """W090: forms are protected, but an anonymous visitor has no session to be their key space."""
    from idempotency_django.views import IdempotentFormMixin

    middleware = list(getattr(settings, "MIDDLEWARE", None) or [])
    forms_used = _IDEMPOTENCY_MIDDLEWARE in middleware or bool(
        IdempotentFormMixin._IDEMPOTENT_FORM_VIEWS
    )
    has_sessions = (
        "django.contrib.sessions" in settings.INSTALLED_APPS and _SESSION_MIDDLEWARE in middleware
    )
    own_resolver = getattr(settings, "IDEMPOTENCY_TENANT_RESOLVER", None) is not None
    if not forms_used or has_sessions or own_resolver:
        return []
    return [
        Warning(
            "Idempotent forms are in use (IdempotencyMiddleware or IdempotentFormMixin) without "
            "Django's sessions: every anonymous visitor's form keys share one key space.",
            hint=f"Add 'django.contrib.sessions' to INSTALLED_APPS and {_SESSION_MIDDLEWARE!r} "
            "to MIDDLEWARE, or set IDEMPOTENCY_TENANT_RESOLVER to a resolver of your own.",
            id="idempotency_django.W090",
        )
    ]


@register(Tags.security)
def check_middleware_order(
    app_configs: Iterable[Any] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """E091: a middleware with ``process_view`` after IdempotencyMiddleware never runs for a
    keyed request (the switch answers in its own ``process_view``): CSRF bypassed."""
    middleware = list(getattr(settings, "MIDDLEWARE", None) or [])
    if _IDEMPOTENCY_MIDDLEWARE not in middleware:
        return []
    after = middleware[middleware.index(_IDEMPOTENCY_MIDDLEWARE) + 1 :]
    skipped = [path for path in after if _has_process_view(path)]
    if not skipped:
        return []
    return _error(
        "E091",
        f"IdempotencyMiddleware comes before {', '.join(skipped)} in MIDDLEWARE: their "
        "process_view() never runs for a request carrying a key (the switch runs the view "
        "in its own), so a client choosing a key skips them (CSRF, LoginRequiredMiddleware).",
        f"Move {_IDEMPOTENCY_MIDDLEWARE!r} after them: last in MIDDLEWARE.",
    )


def _has_process_view(path: object) -> bool:
    try:
        middleware = import_string(str(path))
    except ImportError:
        return False  # Django reports a middleware it can't import itself
    return callable(getattr(middleware, "process_view", None))
