"""Serialising a function's result for storage: JSON that round-trips a few more types."""

from __future__ import annotations

import json
import uuid
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any, Protocol

_TAG = "__idempotency_type__"


class Serializer(Protocol):
    """Turns a result into bytes to store, and back."""

    def dumps(self, value: Any) -> bytes: ...

    def loads(self, data: bytes) -> Any: ...


class JSONSerializer:
    """JSON, plus ``UUID``, ``Decimal``, ``datetime``, ``date`` and ``time`` (tagged objects).

    A replay returns what the first run returned: dicts keep their non-str keys
    (``int``, ``float``, ``bool``, ``None`` and the types above) and a dict that
    looks like one of our tags stays a dict. Tuples come back as lists; anything
    else JSON can't hold (a tuple as a key, too) is a ``TypeError`` when the
    result is stored, inside the call's transaction: nothing commits.
    """

    def dumps(self, value: Any) -> bytes:
        return json.dumps(_tagged(value), default=_encode, ensure_ascii=False).encode()

    def loads(self, data: bytes) -> Any:
        return json.loads(data, object_hook=_decode)


_TYPES: dict[str, tuple[type, Any]] = {
    "uuid": (uuid.UUID, uuid.UUID),
    "decimal": (Decimal, Decimal),
    "datetime": (datetime, datetime.fromisoformat),
    "date": (date, date.fromisoformat),
    "time": (time, time.fromisoformat),
}


_KEY_TYPES = (str, int, float, type(None), uuid.UUID, Decimal, date, time)


def _tagged(value: Any) -> Any:
    """``value`` with every dict JSON would not give back as it is wrapped in a tag."""
    if isinstance(value, dict):
        if all(type(key) is str for key in value) and _TAG not in value:
            return {key: _tagged(item) for key, item in value.items()}
        for key in value:
            if not isinstance(key, _KEY_TYPES):
                raise TypeError(
                    f"An idempotent call's result can't keep a {type(key).__name__} as a dict "
                    "key; pass serializer= for other types."
                )
        return {_TAG: "dict", "value": [[key, _tagged(item)] for key, item in value.items()]}
    if isinstance(value, list | tuple):
        return [_tagged(item) for item in value]
    return value


def _encode(value: Any) -> dict[str, str]:
    for name, (kind, _) in _TYPES.items():
        if isinstance(value, kind):
            text = value.isoformat() if hasattr(value, "isoformat") else str(value)
            return {_TAG: name, "value": text}
    raise TypeError(
        f"An idempotent call's result must be JSON-serialisable (or UUID, Decimal, datetime, "
        f"date, time), got {type(value).__name__}; pass serializer= for other types."
    )


def _decode(obj: dict[str, Any]) -> Any:
    name = obj.get(_TAG)
    if name == "dict" and set(obj) == {_TAG, "value"}:
        return dict(obj["value"])
    if name in _TYPES and set(obj) == {_TAG, "value"}:
        return _TYPES[name][1](obj["value"])
    return obj


__all__ = ["JSONSerializer", "Serializer"]
