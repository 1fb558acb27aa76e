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
import re
from collections.abc import Iterable
from datetime import date, datetime
from decimal import Decimal
from typing import Protocol
from uuid import UUID

# json.loads calls parse_int for every integer literal: small ones become ints (which
# Python shares), long ones keep their text (int() of 4300+ digits raises).
_SHORT_INT = 18
_FLOAT = re.compile(r"(-?)(\d+)(?:\.(\d+))?(?:[eE]([-+]?\d+))?")


class _Hash(Protocol):
    def update(self, data: bytes, /) -> None: ...


class _Digest(bytes):
    """A JSON object already hashed: 32 bytes standing for the whole object."""

    __slots__ = ()


class _Number(str):
    """A JSON number with a fraction or an exponent, as exact normalised text."""

    __slots__ = ()


class _BigInt(str):
    """An integer literal too long to be worth an ``int``, as its (canonical) text."""

    __slots__ = ()


class _Constant(str):
    """``NaN``, ``Infinity`` or ``-Infinity``, which Python's ``json`` accepts."""

    __slots__ = ()


class _Tagged(str):
    """A non-JSON argument accepted by its ``str`` form: ``"<type>:<text>"``."""

    __slots__ = ()


def json_digest(body: bytes) -> bytes | None:
    """SHA-256 of a JSON document's canonical value, or ``None`` if it is not JSON."""
    try:
        value = json.loads(
            body,
            object_pairs_hook=_object,
            parse_float=exact_number,
            parse_int=_integer,
            parse_constant=_Constant,
        )
    except (ValueError, RecursionError):
        return None
    return _root(value)


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
        return _Number(f"{sign}0")  # zero: its exponent means nothing, its sign may
    shift = int(exponent or 0) - len(fraction) + len(digits) - len(significant)
    return _Number(f"{sign}{significant}e{shift}")


def _integer(text: str) -> int | _BigInt:
    return int(text) if len(text) <= _SHORT_INT else _BigInt(text)


def _root(value: object) -> bytes:
    digest = hashlib.sha256()
    _encode(digest, value)
    return digest.digest()


def _object(pairs: list[tuple[str, object]]) -> _Digest:
    # The last of a repeated name wins, as in the dict json.loads would build.
    return _members(dict(pairs).items())


def _members(items: Iterable[tuple[str, object]]) -> _Digest:
    digest = hashlib.sha256()
    for name, value in sorted(items, key=lambda item: item[0]):
        feed(digest, name.encode("utf-8", "surrogatepass"))
        _encode(digest, value)
    return _Digest(digest.digest())


def _encode(digest: _Hash, value: object) -> None:
    # Every encoding starts with its own tag and is self-delimiting: distinct values
    # can never produce the same byte stream.
    if value is None or isinstance(value, bool):
        digest.update({None: b"n", True: b"t", False: b"f"}[value])
    elif isinstance(value, _Digest):
        digest.update(b"o" + value)
    elif isinstance(value, list):
        _encode_array(digest, value)
    elif isinstance(value, int):
        digest.update(b"i")
        feed(digest, int.__repr__(value).encode())
    elif isinstance(value, str):
        digest.update(_STRING_TAGS.get(type(value), b"s"))
        feed(digest, value.encode("utf-8", "surrogatepass"))
    else:  # pragma: no cover - _reduce and json.loads produce nothing else
        raise TypeError(type(value).__name__)


_STRING_TAGS = {_Number: b"d", _BigInt: b"i", _Constant: b"c", _Tagged: b"x"}


def _encode_array(digest: _Hash, values: list[object]) -> None:
    digest.update(b"a" + len(values).to_bytes(8, "big"))
    for item in values:
        _encode(digest, item)


def feed(digest: _Hash, data: bytes) -> None:
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
        return _members((_name(name), _reduce(item)) for name, item in value.items())
    return _tagged(value)


def _float(value: float) -> _Number | _Constant:
    if value != value:
        return _Constant("NaN")
    if value in (float("inf"), float("-inf")):
        return _Constant("Infinity" if value > 0 else "-Infinity")
    return exact_number(repr(value))  # repr is the shortest text that reads back exactly


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
            return _Tagged(f"{name}:{value}")
    raise TypeError(
        f"Idempotent call arguments must be JSON values (dict with str keys, list, tuple, "
        f"str, int, float, bool, None) or UUID, Decimal, datetime, date; got "
        f"{type(value).__name__}."
    )
