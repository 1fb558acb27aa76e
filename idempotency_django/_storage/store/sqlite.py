"""SQLite's part: which of its errors mean "another writer holds the database".

SQLite has one writer at a time for the whole database file: a write meeting
another connection's open write transaction waits the connection's ``timeout``
(its busy handler), then fails with ``SQLITE_BUSY`` ("database is locked").
``SQLITE_LOCKED`` ("database table is locked") is the same conflict within one
process's shared cache. https://www.sqlite.org/rescode.html#busy
"""

from __future__ import annotations

SQLITE_BUSY = 5
SQLITE_LOCKED = 6
_BUSY_CODES = frozenset({SQLITE_BUSY, SQLITE_LOCKED})


def errorcode(exc: BaseException) -> int | None:
    """The primary result code of a sqlite3 error, whether Django wrapped it or not."""
    for error in (exc, exc.__cause__):
        code = getattr(error, "sqlite_errorcode", None)
        if isinstance(code, int):
            return code & 0xFF  # extended codes (SQLITE_BUSY_SNAPSHOT, ...) keep it in the low byte
    return None


def busy(exc: BaseException) -> bool:
    """Whether a database error is SQLite's lock contention (not an unreachable file)."""
    return errorcode(exc) in _BUSY_CODES
