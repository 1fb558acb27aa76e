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

    Tuples come back as lists; anything else JSON can't hold is a ``TypeError``
    when the result is stored, inside the call's transaction: nothing commits.
    """

    def dumps(self, value: Any) -> bytes:
        return json.dumps(value, default=_encode, ensure_ascii=False).encode()

    def loads(self, data: bytes) -> Any:
        return json.loads(data, object_hook=_decode)


_TYPES: dict[str, tuple[type, Any]] = {
    "uuid": (uuid.UUID, uuid.UUID),
    "decimal": (Decimal, Decimal),
    "datetime": (datetime, datetime.fromisoformat),
    "date": (date, date.fromisoformat),
    "time": (time, time.fromisoformat),
}


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
    if name in _TYPES and set(obj) == {_TAG, "value"}:
        return _TYPES[name][1](obj["value"])
    return obj


__all__ = ["JSONSerializer", "Serializer"]
