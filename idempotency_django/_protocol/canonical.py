"""Hashing JSON values canonically: key order and spacing never count, numbers compare exactly.

A value is hashed, not rendered: every JSON object is replaced by the SHA-256 of its
members (sorted by name) as soon as ``json.loads`` has parsed it, so a large body never
becomes a large tree of Python objects, nor a second canonical string.

What counts as "the same number": the exact decimal value written, within its kind.
``0.30000000000000001`` and ``0.3`` differ, ``1e400`` and ``5e999`` differ (Python's
``json`` turns each pair into one float); ``1.0``, ``1.00`` and ``10e-1`` agree; an
integer literal ``1`` and ``1.0`` differ, because ``json.loads`` hands a view an ``int``
for one and a ``float`` for the other and a view may branch on that.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import struct
from collections.abc import Iterable, Iterator
from datetime import date, datetime
from decimal import Decimal
from typing import Protocol
from uuid import UUID

# json.loads calls parse_int for every integer literal: small ones become ints (which
# Python shares), long ones keep their text (int() of 4300+ digits raises).
_SHORT_INT = 18
_FLOAT = re.compile(r"(-?)(\d+)(?:\.(\d+))?(?:[eE]([-+]?\d+))?")


class Hash(Protocol):
    """What ``feed`` writes to: a ``hashlib`` object."""

    def update(self, data: bytes, /) -> None: ...


# Leaves that are not JSON strings are bytes (compact, unlike str subclasses); a plain
# ``bytes`` is a hashed object: the 32-byte digest standing for all its members.


class _Number(bytes):
    """A JSON number with a fraction or an exponent, as exact normalised text."""

    __slots__ = ()


class _BigInt(bytes):
    """An integer literal too long to be worth an ``int``, as its (canonical) text."""

    __slots__ = ()


class _Constant(bytes):
    """``NaN``, ``Infinity`` or ``-Infinity``, which Python's ``json`` accepts."""

    __slots__ = ()


class _Tagged(bytes):
    """A non-JSON argument accepted by its ``str`` form: ``b"<type>:<text>"``."""

    __slots__ = ()


_BYTES_TAGS = {_Number: b"d", _BigInt: b"i", _Constant: b"c", _Tagged: b"x"}


def json_digest(body: bytes) -> bytes | None:
    """SHA-256 of a JSON document's canonical value, or ``None`` if it is not JSON."""
    try:
        value = json.loads(
            body,
            object_pairs_hook=_object,
            parse_float=_fraction,
            parse_int=_integer,
            parse_constant=_constant,
        )
        return _root(value)
    except (ValueError, RecursionError):  # nested deeper than Python recurses: as bytes
        return None


def value_digest(value: object) -> bytes:
    """SHA-256 of a Python value as if it were the JSON document it stands for."""
    return _root(_reduce(value))


def exact_number(text: str) -> _Number:
    """``-?digits e exponent`` with no leading or trailing zeros: exact, never rounded."""
    match = _FLOAT.fullmatch(text)
    if match is None:
        raise ValueError(f"not a JSON number: {text!r}")
    sign, whole, fraction, exponent = match.groups(default="")
    digits = (whole + fraction).lstrip("0")
    significant = digits.rstrip("0")
    if not significant:
        return _Number(f"{sign}0".encode())  # zero: its exponent means nothing, its sign may
    shift = int(exponent or 0) - len(fraction) + len(digits) - len(significant)
    return _Number(f"{sign}{significant}e{shift}".encode())


def _fraction(text: str) -> float | _Number:
    # A float (24 bytes) stands for the text whenever it is exactly that number, as
    # most are; otherwise (0.30000000000000001, 1e400) the exact text is kept.
    value = float(text)
    if repr(value) == text:
        return value  # the common case, and cheap to recognise
    exact = exact_number(text)
    return value if math.isfinite(value) and exact_number(repr(value)) == exact else exact


def _integer(text: str) -> int | _BigInt:
    return int(text) if len(text) <= _SHORT_INT else _BigInt(text.encode())


def _constant(text: str) -> _Constant:
    return _Constant(text.encode())


def _root(value: object) -> bytes:
    digest = hashlib.sha256()
    _encode(digest, value)
    return digest.digest()


def _object(pairs: list[tuple[str, object]]) -> bytes:
    # Sorted in place, stably: of a repeated name the last is kept, as json.loads would.
    pairs.sort(key=_first)
    return _members(_last_of_each_name(pairs))


def _first(pair: tuple[str, object]) -> str:
    return pair[0]


def _last_of_each_name(pairs: list[tuple[str, object]]) -> Iterator[tuple[str, object]]:
    for index, pair in enumerate(pairs):
        if index + 1 == len(pairs) or pairs[index + 1][0] != pair[0]:
            yield pair


def _members(items: Iterable[tuple[str, object]]) -> bytes:
    """The digest of an object whose members come sorted by name, each name once."""
    digest = hashlib.sha256()
    for name, value in items:
        feed(digest, name.encode("utf-8", "surrogatepass"))
        _encode(digest, value)
    return digest.digest()


def _encode(digest: Hash, value: object) -> None:
    # Every encoding starts with its own tag and is self-delimiting: distinct values
    # can never produce the same byte stream.
    if value is None or isinstance(value, bool):
        digest.update({None: b"n", True: b"t", False: b"f"}[value])
    elif type(value) is bytes:
        digest.update(b"o" + value)
    elif isinstance(value, bytes):
        digest.update(_BYTES_TAGS[type(value)])
        feed(digest, value)
    elif isinstance(value, list):
        _encode_array(digest, value)
    elif isinstance(value, float):
        # Equal numbers never take different routes: _fraction keeps text only when no
        # float is exactly that number. Finite: _fraction and _float see to it.
        digest.update(b"r" + struct.pack(">d", value))
    elif isinstance(value, int):
        digest.update(b"i")
        feed(digest, int.__repr__(value).encode())
    elif isinstance(value, str):
        digest.update(b"s")
        feed(digest, value.encode("utf-8", "surrogatepass"))
    else:  # pragma: no cover - _reduce and json.loads produce nothing else
        raise TypeError(type(value).__name__)


def _encode_array(digest: Hash, values: list[object]) -> None:
    digest.update(b"a" + len(values).to_bytes(8, "big"))
    for item in values:
        _encode(digest, item)


def feed(digest: Hash, data: bytes) -> None:
    """Length-prefixed, so that concatenations stay unambiguous."""
    digest.update(len(data).to_bytes(8, "big"))
    digest.update(data)


def _reduce(value: object) -> object:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)  # a str subclass (an enum) counts as its text
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, list | tuple):
        return [_reduce(item) for item in value]
    if isinstance(value, dict):
        members = [(_name(name), _reduce(item)) for name, item in value.items()]
        return _members(sorted(members, key=_first))
    return _tagged(value)


def _float(value: float) -> float | _Constant:
    if math.isnan(value):
        return _constant("NaN")
    if math.isinf(value):
        return _constant("Infinity" if value > 0 else "-Infinity")
    return float(value)


def _name(name: object) -> str:
    if not isinstance(name, str):
        raise TypeError(
            f"Idempotent call arguments must have str dict keys, got {type(name).__name__} "
            f"({name!r}): JSON would turn it into a string and merge it with one."
        )
    return str(name)


def _tagged(value: object) -> _Tagged:
    # datetime before date: a datetime is a date.
    for kind, name in (
        (UUID, "uuid"),
        (Decimal, "decimal"),
        (datetime, "datetime"),
        (date, "date"),
    ):
        if isinstance(value, kind):
            return _Tagged(f"{name}:{value}".encode())
    raise TypeError(
        f"Idempotent call arguments must be JSON values (dict with str keys, list, tuple, "
        f"str, int, float, bool, None) or UUID, Decimal, datetime, date; got "
        f"{type(value).__name__}."
    )
