"""Per-view options, checked when the decorator (or mixin) is applied."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from functools import partial
from typing import Any, Final, TypedDict, Unpack

from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from django.http import HttpRequest

from idempotency_django import _conf as settings_module
from idempotency_django._conf import MAX_TTL, MAX_WAIT, TenantResolver, bounded, conf
from idempotency_django._protocol.fingerprint import Fingerprinter, request_fingerprint
from idempotency_django._protocol.redact import Redactor, redactor
from idempotency_django.databases import chooser, entries_alias, setting

KeyExtractor = Callable[[HttpRequest], "str | None"]
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
DEFAULT_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
PROTOCOLS = ("lock", "lease")


class ToolOptions(TypedDict, total=False):
    """The options of every face that claims a key: each overrides its setting (``None``: the
    setting). An MCP tool takes these.

    The one declaration of an option's name and type, in three layers (a tool's, a GraphQL
    mutation's, a view's): the faces' keyword options (``**options: Unpack[...]``),
    :meth:`Options.build` and the unknown-option error read them; how a value is checked
    and made ready is in :data:`_READY` and :class:`Options`.
    """

    tenant: TenantResolver | None  # IDEMPOTENCY_TENANT_RESOLVER
    ttl: float | timedelta | None  # IDEMPOTENCY_TTL
    database: str | Callable[[HttpRequest], str] | None  # IDEMPOTENCY_DATABASE
    protocol: str | None  # IDEMPOTENCY_PROTOCOL
    wait: float | timedelta | None  # IDEMPOTENCY_WAIT


class MutationOptions(ToolOptions, total=False):
    """A GraphQL mutation's options: a tool's, and the key's header and the claim's cache."""

    header: str | None  # IDEMPOTENCY_HEADER
    required: bool | None  # IDEMPOTENCY_REQUIRED
    lease: float | timedelta | None  # IDEMPOTENCY_LEASE
    cache: str | None  # IDEMPOTENCY_CACHE


class ViewOptions(MutationOptions, total=False):
    """``@idempotent``'s options (and its mixins'): a mutation's, and what only a view has."""

    methods: Iterable[str] | None  # default: POST, PUT, PATCH, DELETE
    key: KeyExtractor | None  # default: the header
    fingerprint: Fingerprinter | None  # default: the request's method, path and body
    redact: Redactor | Sequence[str] | None  # IDEMPOTENCY_REDACT


#: Every view option's name, in declaration order (the unknown-option error lists them).
VIEW_OPTIONS: Final = tuple(ViewOptions.__annotations__)
_VIEW_NAMES: Final = frozenset(VIEW_OPTIONS)
#: A GraphQL mutation's options (Strawberry's; Graphene's also take ``redact``).
MUTATION_OPTIONS: Final = tuple(MutationOptions.__annotations__)
#: An MCP tool's options.
TOOL_OPTIONS: Final = tuple(ToolOptions.__annotations__)


@dataclass(frozen=True)
class Options:
    """What a view overrides; ``None`` means "use the setting at request time"."""

    header: str | None = None
    required: bool | None = None
    ttl: timedelta | None = None
    lease: timedelta | None = None
    tenant: TenantResolver | None = None
    database: str | Callable[[HttpRequest], str] | None = None
    cache: str | None = None
    methods: frozenset[str] = DEFAULT_METHODS
    key: KeyExtractor | None = None
    fingerprint: Fingerprinter | None = None
    protocol: str | None = None
    wait: float | None = None
    redact: Redactor | None = None

    def __post_init__(self) -> None:
        _check_instance("header", self.header, str)
        _check_instance("required", self.required, bool)
        if self.database is not None and not callable(self.database):
            _check_instance("database", self.database, str)
        _check_instance("cache", self.cache, str)
        for name in ("tenant", "key", "fingerprint"):
            if getattr(self, name) is not None and not callable(getattr(self, name)):
                raise TypeError(f"@idempotent({name}=...) must be a callable taking the request.")
        if self.ttl is not None and self.lease is not None and self.lease >= self.ttl:
            raise TypeError(
                "@idempotent(lease=...) must be shorter than @idempotent(ttl=...); "
                f"got {_seconds(self.lease)} and {_seconds(self.ttl)}."
            )
        if self.protocol is not None and self.protocol not in PROTOCOLS:
            raise TypeError(
                f'@idempotent(protocol=...) must be "lock" or "lease", got {self.protocol!r}.'
            )
        if self.methods & SAFE_METHODS:
            raise TypeError(
                f"@idempotent(methods=...) can't protect safe methods: "
                f"{sorted(self.methods & SAFE_METHODS)}."
            )

    @classmethod
    def build(cls, **options: Unpack[ViewOptions]) -> Options:
        """Validate and normalise keyword options; a wrong one is a ``TypeError`` now."""
        check_option_names(options)
        # None is every field's default (methods': DEFAULT_METHODS, what None means there).
        ready: dict[str, Any] = {
            name: value for name, value in options.items() if value is not None
        }
        for name, make_ready in _READY.items():
            if name in ready:
                ready[name] = make_ready(ready[name])
        return cls(**ready)

    def resolve(self, request: HttpRequest | None = None) -> Policy:
        """The settings in force for one request: compiled once per settings change.

        A database chosen per request (a callable) is the one part resolved each time.
        """
        policy = self._compiled()
        if policy.chooser is None:
            return policy
        alias = entries_alias(policy.chooser, request)
        return replace(policy, database=alias, protocol=protocol_for(alias, policy.wanted))

    def _compiled(self) -> Policy:
        cached: tuple[int, Policy] | None = self.__dict__.get("_compiled_policy")
        if cached is not None and cached[0] == settings_module.generation:
            return cached[1]
        try:
            # By value too: the DRF mixin builds equal Options on every request.
            policy = _COMPILED.get(self)
            if policy is None:
                if len(_COMPILED) >= 1024:  # options built per request with new callables
                    _COMPILED.clear()
                policy = _COMPILED[self] = self._compile()
        except TypeError:  # an unhashable option (a callable object): compiled each time
            policy = self._compile()
        object.__setattr__(self, "_compiled_policy", (settings_module.generation, policy))
        return policy

    def _compile(self) -> Policy:
        chosen = chooser(setting() if self.database is None else self.database)
        database = chosen if isinstance(chosen, str) else ""
        wanted = self.protocol or conf.PROTOCOL
        header = self.header or conf.HEADER
        return Policy(
            header=header,
            required=conf.REQUIRED if self.required is None else self.required,
            ttl=self.ttl or conf.TTL,
            lease=self.lease or conf.LEASE,
            tenant=self.tenant or conf.TENANT_RESOLVER,
            database=database,
            cache=self.cache if self.cache is not None else conf.CACHE,
            key_max_length=conf.KEY_MAX_LENGTH,
            key=self.key,
            fingerprint=self.fingerprint or request_fingerprint,
            protocol=protocol_for(database, wanted) if database else "",
            wait=conf.WAIT if self.wait is None else self.wait,
            meta_header=meta_name(header),
            chooser=None if isinstance(chosen, str) else chosen,
            wanted=wanted,
            redact=self.redact if self.redact is not None else redactor(conf.REDACT),
            idle=conf.IDLE_TIMEOUT,
        )


_COMPILED: dict[Options, Policy] = {}
settings_module.compiled(_COMPILED.clear)


def meta_name(header: str) -> str:
    """Where Django's ``request.META`` keeps ``header`` (what ``request.headers`` reads)."""
    name = header.upper().replace("-", "_")
    return name if name in ("CONTENT_TYPE", "CONTENT_LENGTH") else f"HTTP_{name}"


@dataclass(frozen=True)
class Policy:
    """Options and settings merged, for one request."""

    header: str
    required: bool
    ttl: timedelta
    lease: timedelta
    tenant: TenantResolver
    database: str
    cache: str | None
    key_max_length: int
    key: KeyExtractor | None
    fingerprint: Fingerprinter
    protocol: str = "lease"
    wait: float = 0.0
    meta_header: str = ""  # ``header`` as a ``request.META`` key; "" to read ``headers``
    # A database chosen per request: ``database`` and ``protocol`` are set by ``resolve``.
    chooser: Callable[[HttpRequest], str] | None = None
    wanted: str | None = None  # the protocol asked for (None: the database's default)
    redact: Redactor | None = None  # what of the answer is stored for replays
    idle: timedelta | None = None  # IDEMPOTENCY_IDLE_TIMEOUT, compiled with the rest


def protocol_for(database: str, wanted: str | None) -> str:
    """The protocol a request on ``database`` uses: ``wanted``, else the database's default."""
    postgres = connections[database].vendor == "postgresql"
    if wanted is None:
        return "lock" if postgres else "lease"
    if wanted == "lock" and not postgres:
        raise ImproperlyConfigured(
            f'The "lock" idempotency protocol needs PostgreSQL; the database {database!r} is '
            f'{connections[database].vendor}. Use protocol="lease" there.'
        )
    return wanted


def check_options(
    owner: str,
    *,
    ttl: float | timedelta | None,
    wait: float | timedelta | None,
    protocol: str | None,
) -> None:
    """Refuse a wrong ``ttl``, ``wait`` or ``protocol`` with a ``ValueError`` naming ``owner``."""
    for name, value, maximum, limits in (
        ("ttl", ttl, MAX_TTL, "positive seconds (at most 100 years) or a timedelta"),
        ("wait", wait, MAX_WAIT, "seconds from 0 to a day, or a timedelta"),
    ):
        try:
            if value is not None:
                bounded(value, maximum, zero=name == "wait")
        except (TypeError, ValueError):
            raise ValueError(f"{owner}({name}=...) takes {limits}, got {value!r}.") from None
    if protocol not in (None, "lock", "lease"):
        raise ValueError(f'{owner}(protocol=...) takes "lock", "lease" or None, got {protocol!r}.')


def check_option_names(options: Mapping[str, object]) -> None:
    """Refuse an unknown keyword, naming the valid ones (read from :class:`ViewOptions`)."""
    if _VIEW_NAMES.issuperset(options):
        return
    unknown = sorted(set(options).difference(VIEW_OPTIONS))
    what = "an unknown option" if len(unknown) == 1 else "unknown options"
    raise TypeError(
        f"@idempotent(...) got {what} {', '.join(map(repr, unknown))}; "
        f"the options are: {', '.join(VIEW_OPTIONS)}."
    )


def check_keywords(owner: str, given: Mapping[str, object], accepted: Iterable[str]) -> None:
    """Refuse a keyword ``owner`` does not take, as Python would for a written-out signature."""
    for name in given:
        if name not in accepted:
            raise TypeError(f"{owner}() got an unexpected keyword argument {name!r}")


def build_for(owner: str, given: Mapping[str, Any], accepted: Iterable[str]) -> Options:
    """:meth:`Options.build` for a face taking only the ``accepted`` options (its layer's)."""
    check_keywords(owner, given, accepted)
    return Options.build(**given)


def _seconds(duration: timedelta) -> str:
    return f"{duration.total_seconds():g} seconds"


def _check_instance(name: str, value: object, kind: type) -> None:
    if value is not None and not isinstance(value, kind):
        raise TypeError(f"@idempotent({name}=...) must be a {kind.__name__}, got {value!r}.")


def _wait(value: float | timedelta) -> float:
    try:
        return bounded(value, MAX_WAIT, zero=True).total_seconds()
    except (TypeError, ValueError):
        raise TypeError(
            f"@idempotent(wait=...) takes seconds (0 up to a day) or a timedelta, got {value!r}."
        ) from None


def _duration(name: str, value: float | timedelta) -> timedelta:
    try:
        return bounded(value, MAX_TTL)
    except TypeError:
        raise TypeError(
            f"@idempotent({name}=...) takes seconds or a timedelta, got {value!r}."
        ) from None
    except ValueError:
        raise TypeError(
            f"@idempotent({name}=...) must be positive and at most 100 years, got {value!r}."
        ) from None


def _redactor(value: Redactor | Sequence[str]) -> Redactor | None:
    try:
        return redactor(value)
    except TypeError as exc:
        raise TypeError(f"@idempotent({exc}".replace("redact= ", "redact=...) ", 1)) from None


def _methods(value: Iterable[str]) -> frozenset[str]:
    if isinstance(value, str):
        raise TypeError('@idempotent(methods=...) takes a list, e.g. ["POST"].')
    return frozenset(m.upper() for m in value)


#: How an option's value (not None) is checked and made ready for :class:`Options` (the
#: others are checked there, as given): the one place a new option's normaliser goes.
_READY: Final[Mapping[str, Callable[[Any], Any]]] = {
    "ttl": partial(_duration, "ttl"),
    "lease": partial(_duration, "lease"),
    "methods": _methods,
    "wait": _wait,
    "redact": _redactor,
}
