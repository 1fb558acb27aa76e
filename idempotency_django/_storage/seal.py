"""Stored answers sealed at rest: AES-GCM over the headers and body, bound to their row.

Every answer is sealed where its bytes are produced (the entry row's write, the
replay cache's value) and opened where a replay needs them, so that a replica, a
backup or a dump of the entries' table holds no body and no header value in
clear. A sealed blob is::

    version (1 byte) | key id (4) | nonce (12) | AES-GCM(headers and body) + tag (16)

The key hierarchy (docs/security.rst, "Key hierarchy"): the default key
(``"server-secret"`` in ``IDEMPOTENCY_ENCRYPTION_KEYS``) is derived from settings
alone (``IDEMPOTENCY_SECRET``, else ``SECRET_KEY``; ``SECRET_KEY_FALLBACKS``' keys
still open), never from anything a database holds.

The associated data of version 3 is (tenant, key, status, reason, the database's
identity), each length-prefixed or fixed-size: a blob copied onto another key's row,
into another database, or under an edited status code does not open. The database
alias is deliberately not part of it: an alias is a name in one deployment's
settings, and renaming it must not make every stored answer unreadable; the
identity is what the database's server knows it by (its OID and cluster on
PostgreSQL: a template clone or a dump restored as another database has its own),
bound with a random row persisted in it (``secret.database_identity``).

Version 2 (0.5): the same, but the identity was the row alone, which a clone carries
and a table writer can copy with the answer. Version 1 (0.4): associated data
(tenant, key) only, and the default key derived from the server secret persisted in
the database, so anyone who can write the table can forge one. A replay opens either
only while the operator's ``IDEMPOTENCY_OPEN_LEGACY_ROWS`` is on (an upgrade window);
otherwise it answers answer-unreadable. ``reseal_idempotency`` opens exactly what a
replay opens (:func:`believed`): them too under that setting only. Never sealed again.

The key id is the first four bytes of a hash of the key, so that rotation knows
which configured key opens a blob without trying each, and can say that a blob's
key is no longer configured.

A row written by 0.3 (headers as a JSON list, body in clear) proves nothing: a
replay reads it only under the same setting (answer-unreadable otherwise), and so
does ``reseal_idempotency`` (which would otherwise launder a planted one). The
decision never comes from the database: a table writer chooses the row's form, not
whether it is believed. A sealed
row's ``response_headers`` holds :data:`ROW_MARKER` (a JSON object, never a list),
which is how a reader tells the two apart.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from idempotency_django._conf import compiled, conf
from idempotency_django._protocol.responses import StoredResponse
from idempotency_django.exceptions import AnswerTooLarge, AnswerUnreadable

logger = logging.getLogger("idempotency_django")

VERSION = b"\x03"
VERSION_0_5 = b"\x02"  # opened, never sealed: see the module's docstring
VERSION_0_4 = b"\x01"  # the same
_LEGACY = {
    VERSION_0_5: "sealed by 0.5 (bound to the identity row alone)",
    VERSION_0_4: "sealed by 0.4",
}
DERIVED = "server-secret"  # in IDEMPOTENCY_ENCRYPTION_KEYS: the key derived from settings
KEY_BYTES = 32
ROW_MARKER: dict[str, int] = {"sealed": 1}
ROW_MARKER_JSON = json.dumps(ROW_MARKER)
LEGACY_CLOSED = (
    "opened (by replays and reseal_idempotency alike) only under IDEMPOTENCY_OPEN_LEGACY_ROWS "
    "(its key, or its absence of one, is within a table writer's reach)"
)
_ID, _NONCE, _TAG = 4, 12, 16
_HEAD = 1 + _ID + _NONCE
_LENGTH = struct.Struct(">I")
_STATUS = struct.Struct(">H")


@dataclass(frozen=True)
class Sealed:
    """A stored answer as read, not yet opened: status and reason in clear, the rest sealed."""

    status: int
    reason: str
    blob: bytes


class Unreadable(Exception):
    """Why a blob did not open: tampered with, moved to another key, or its key is gone."""

    def __init__(self, why: str, key_id: str = "") -> None:
        super().__init__(why)
        self.why, self.key_id = why, key_id


# -- the keys --------------------------------------------------------------------------


def decode_key(text: str) -> bytes:
    """A configured key's 32 bytes; ``ValueError`` when it is not urlsafe base64 of 32 bytes."""
    try:
        raw = base64.urlsafe_b64decode(text.encode("ascii"))
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise ValueError("not urlsafe base64") from None
    if len(raw) != KEY_BYTES:
        raise ValueError(f"{len(raw)} bytes, not {KEY_BYTES}")
    return raw


def new_key() -> str:
    """A fresh key in the form ``IDEMPOTENCY_ENCRYPTION_KEYS`` takes."""
    return base64.urlsafe_b64encode(os.urandom(KEY_BYTES)).decode("ascii")


def key_id(key: bytes) -> bytes:
    return hashlib.sha256(b"idempotency_django.seal.id" + key).digest()[:_ID]


class Ring:
    """The configured keys of one entries database: the newest seals, every one opens."""

    def __init__(
        self, keys: list[bytes], limit: int, legacy: Callable[[], bytes] | None = None
    ) -> None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self.ciphers = {key_id(key): AESGCM(key) for key in keys}
        self.newest = key_id(keys[0])
        self.limit = limit  # IDEMPOTENCY_MAX_STORED_BYTES, read once with the keys
        self.legacy = legacy  # 0.4's derived key, built on first need (a database read)
        self.opening_only: dict[bytes, Any] = {}  # ... and once built: 0.4's blobs only

    def seal(self, plain: bytes, aad: bytes) -> bytes:
        nonce = os.urandom(_NONCE)
        sealed = self.ciphers[self.newest].encrypt(nonce, plain, aad)
        return b"".join((VERSION, self.newest, nonce, sealed))

    def open(self, blob: bytes, aad: Callable[[bytes], bytes], *, legacy: bool = False) -> bytes:
        """``blob`` opened; ``aad(version)`` gives the associated data its version bound.

        ``legacy``: 0.5's and 0.4's blobs open too (the caller's decision, not the database's).
        """
        from cryptography.exceptions import InvalidTag

        version = blob[:1]
        if (version != VERSION and version not in _LEGACY) or len(blob) < _HEAD + _TAG:
            raise Unreadable("not a sealed answer")
        if version in _LEGACY and not legacy:
            raise Unreadable(f"{_LEGACY[version]}, {LEGACY_CLOSED}", blob[1 : 1 + _ID].hex())
        kid = blob[1 : 1 + _ID]
        cipher = self.ciphers.get(kid)
        if cipher is None and version == VERSION_0_4:
            cipher = self.opening_only.get(kid) or self._legacy(kid)
        if cipher is None:
            raise Unreadable("sealed under a key no longer configured", kid.hex())
        try:
            return cipher.decrypt(blob[1 + _ID : _HEAD], blob[_HEAD:], aad(version))
        except InvalidTag:
            raise Unreadable("tampered with, or moved from another key", kid.hex()) from None

    def _legacy(self, kid: bytes) -> Any:
        """0.4's derived key, when ``kid`` names it (read once, kept with the others)."""
        if self.legacy is None:
            return None
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        key, self.legacy = self.legacy(), None
        self.opening_only = {key_id(key): AESGCM(key)}
        return self.opening_only.get(kid)


_rings: dict[str, Ring] = {}


def ring(using: str) -> Ring:
    """The key ring for the entries database ``using`` (built once per settings change)."""
    found = _rings.get(using)
    if found is None:
        from idempotency_django._storage.secret import settings_roots

        keys: list[bytes] = []
        for entry in conf.ENCRYPTION_KEYS:
            derived = entry == DERIVED
            keys += [_subkey(root) for root in settings_roots()] if derived else [decode_key(entry)]
        legacy = _legacy_key(using) if DERIVED in conf.ENCRYPTION_KEYS else None
        found = _rings[using] = Ring(keys, conf.MAX_STORED_BYTES, legacy)
    return found


def _subkey(root: bytes) -> bytes:
    # A subkey: a root is never itself a cipher key.
    return hmac.new(root, b"idempotency_django.seal", "sha256").digest()


def _legacy_key(using: str) -> Callable[[], bytes]:
    def build() -> bytes:
        from idempotency_django._storage.secret import server_secret

        # 0.4's: rooted in the server secret, which the database itself holds.
        return hmac.new(server_secret(using), b"idempotency_django.seal", "sha256").digest()

    return build


compiled(_rings.clear)


# -- answers ---------------------------------------------------------------------------


def associated(tenant: str, key: str) -> bytes:
    """Version 1's associated data: (tenant, key), so that no two pairs coincide."""
    return _prefixed(tenant) + key.encode("utf-8", "surrogatepass")


def bound(
    using: str, tenant: str, key: str, status: int, reason: str, version: bytes = VERSION
) -> bytes:
    """Version 3's: (tenant, key, status, reason, the database's identity); version 2's
    the same with 0.5's identity, the row's alone."""
    from idempotency_django._storage.secret import database_identity, row_identity

    identity = database_identity(using) if version == VERSION else row_identity(using)
    return b"".join(
        (_prefixed(tenant), _prefixed(key), _STATUS.pack(status), _prefixed(reason), identity)
    )


def _prefixed(text: str) -> bytes:
    raw = text.encode("utf-8", "surrogatepass")
    return _LENGTH.pack(len(raw)) + raw


def _aad(using: str, tenant: str, key: str, status: int, reason: str) -> Callable[[bytes], bytes]:
    def of(version: bytes) -> bytes:
        if version == VERSION_0_4:
            return associated(tenant, key)
        return bound(using, tenant, key, status, reason, version)

    return of


def plain(response: StoredResponse) -> bytes:
    """What is sealed: the headers (JSON: any byte, NUL included, survives) then the body."""
    headers = json.dumps(response.headers, ensure_ascii=False).encode("utf-8", "surrogatepass")
    return b"".join((_LENGTH.pack(len(headers)), headers, response.body))


def seal(using: str, tenant: str, key: str, response: StoredResponse) -> Sealed:
    """``response`` sealed for (tenant, key); ``AnswerTooLarge`` past the stored-bytes bound."""
    data, keys = plain(response), ring(using)
    if len(data) > keys.limit:
        raise AnswerTooLarge.of(len(data), keys.limit)
    aad = bound(using, tenant, key, response.status, response.reason)
    return Sealed(response.status, response.reason, keys.seal(data, aad))


def opened(
    using: str, tenant: str, key: str, sealed: Sealed, *, legacy: bool = False
) -> StoredResponse:
    """The answer in ``sealed``; raises :class:`Unreadable` when it does not open.

    ``legacy``: a 0.5 or 0.4 blob opens too (:data:`LEGACY_CLOSED` otherwise).
    """
    aad = _aad(using, tenant, key, sealed.status, sealed.reason)
    data = ring(using).open(sealed.blob, aad, legacy=legacy)
    (length,) = _LENGTH.unpack_from(data)
    end = _LENGTH.size + length
    headers = json.loads(data[_LENGTH.size : end].decode("utf-8", "surrogatepass"))
    pairs = [(str(name), str(value)) for name, value in headers]
    # Only a current blob is reused by the replay cache (which opens nothing older).
    reused = sealed.blob if sealed.blob[:1] == VERSION else b""
    return StoredResponse(sealed.status, pairs, data[end:], sealed.reason, sealed=reused)


def believed(using: str, tenant: str, key: str, found: StoredResponse | Sealed) -> StoredResponse:
    """What a replay opens of a row's answer; raises :class:`Unreadable` for what it refuses.

    The one decision: :func:`replayable` answers with it and :func:`resealed` re-seals
    only what it opens, so that ``reseal_idempotency`` never makes openable a row that a
    replay refuses. 0.5's and 0.4's blobs and 0.3's plain rows only under
    ``IDEMPOTENCY_OPEN_LEGACY_ROWS``: a setting, so that no value a table writer controls
    decides what is believed.
    """
    legacy = conf.OPEN_LEGACY_ROWS
    if isinstance(found, StoredResponse):
        if not legacy:
            raise Unreadable(f"stored in clear by 0.3, {LEGACY_CLOSED}")
        return found
    return opened(using, tenant, key, found, legacy=legacy)


def replayable(using: str, tenant: str, key: str, found: StoredResponse | Sealed) -> StoredResponse:
    """The answer to replay from a row (:func:`believed`); 500 problem when unreadable."""
    try:
        return believed(using, tenant, key, found)
    except Unreadable as exc:
        logger.error(
            "idempotency: the stored answer of a key could not be opened (%s; key id %s, "
            "database %r): answered 500 answer-unreadable until the entry expires",
            exc.why,
            exc.key_id or "-",
            using,
        )
        raise AnswerUnreadable() from None


# -- the row's columns -------------------------------------------------------------------


def row_columns(using: str, tenant: str, key: str, response: StoredResponse) -> tuple[str, bytes]:
    """``(response_headers, response_body)`` as written: the marker and the sealed blob."""
    return ROW_MARKER_JSON, seal(using, tenant, key, response).blob


def from_row(status: int | None, reason: str, headers: Any, body: Any) -> StoredResponse | Sealed:
    """A finished row's answer: a 0.3 row's plain answer when its headers are 0.3's JSON
    list of pairs, else :class:`Sealed`. What a table writer puts in the columns is at
    most an answer that does not open, never an error: a status no response can carry
    (or none) is a seal that nothing opens."""
    if status is None or not 100 <= status <= 599:
        return Sealed(0, reason, b"")
    pairs = _pairs(headers)
    if pairs is None:
        return Sealed(status, reason, bytes(body or b""))
    return StoredResponse(status, pairs, bytes(body or b""), reason)


def _pairs(headers: Any) -> list[tuple[str, str]] | None:
    try:
        if isinstance(headers, str | bytes):
            headers = json.loads(headers)
        if isinstance(headers, list):
            return [(str(name), str(value)) for name, value in headers]
    except (ValueError, TypeError):
        pass
    return None


class Row(Protocol):
    """What :func:`answer_of` reads of an entry (an ``IdempotencyEntry``)."""

    tenant: str
    key: str
    response_status: int | None
    response_reason: str
    response_headers: Any
    response_body: Any


def answer_of(using: str, row: Row) -> StoredResponse | None:
    """A finished entry's answer, opened (``None`` in progress); raises :class:`Unreadable`.

    For an operator's look (the admin, ``inspect_idempotency``), which replays
    nothing: 0.5's, 0.4's and 0.3's rows open whatever the setting, so that the
    operator sees what a forger planted.
    """
    if row.response_status is None:
        return None
    found = from_row(
        row.response_status, row.response_reason, row.response_headers, row.response_body
    )
    if isinstance(found, StoredResponse):
        return found
    return opened(using, row.tenant, row.key, found, legacy=True)


def is_sealed_row(headers: Any) -> bool:
    """Whether :func:`from_row` reads a row with these headers as sealed."""
    return _pairs(headers) is None


def resealed(using: str, tenant: str, key: str, found: StoredResponse | Sealed) -> bytes | None:
    """``found`` sealed under the newest key, or ``None`` when it already is.

    Only what a replay opens (:func:`believed`: replay and reseal never disagree), so
    0.5's, 0.4's and 0.3's rows only under ``IDEMPOTENCY_OPEN_LEGACY_ROWS``.
    Raises :class:`Unreadable` for a row a replay refuses: it is left as it is.
    """
    current = ring(using)
    if isinstance(found, Sealed) and found.blob[: 1 + _ID] == VERSION + current.newest:
        return None
    answer = believed(using, tenant, key, found)
    return current.seal(plain(answer), bound(using, tenant, key, answer.status, answer.reason))


__all__ = [
    "DERIVED",
    "Ring",
    "Sealed",
    "Unreadable",
    "believed",
    "decode_key",
    "new_key",
    "opened",
    "replayable",
    "ring",
    "row_columns",
    "seal",
]
