"""The black-box transport: real HTTP through httpx, one connection pool per caller."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx

from idempotency_django.conformance.scenarios import Answer

TIMEOUT = 30.0  # seconds per request: a held request holds for a few, nothing needs more


class HttpTransport:
    """POSTs to ``url`` with the caller's headers (``headers``) or the other caller's."""

    concurrent = True
    in_process = False

    def __init__(
        self,
        url: str,
        headers: Mapping[str, str],
        other_headers: Mapping[str, str] | None = None,
        *,
        timeout: float = TIMEOUT,
        connections: int = 32,
    ) -> None:
        self.url = url
        self.has_other_caller = bool(other_headers)
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        self._main = httpx.Client(headers=dict(headers), timeout=timeout, limits=limits)
        self._other = httpx.Client(
            headers=dict(other_headers or {}), timeout=timeout, limits=limits
        )

    def send(
        self, headers: Mapping[str, str | bytes], body: bytes, *, other: bool = False
    ) -> Answer:
        client = self._other if other else self._main
        try:
            encoded = {name.encode(): _bytes(value) for name, value in headers.items()}
            response = client.post(self.url, content=body, headers=encoded)
        except httpx.HTTPError as error:
            return Answer(0, {}, b"", f"{type(error).__name__}: {error}")
        found = {name.lower(): value for name, value in response.headers.items()}
        return Answer(response.status_code, found, response.content)

    def count(self, url: str) -> int:
        """GET ``url`` as the main caller: the effects so far (``ValueError`` if unreadable)."""
        try:
            response = self._main.get(url)
        except httpx.HTTPError as error:
            raise ValueError(f"{type(error).__name__}: {error}") from None
        if response.status_code != 200:
            raise ValueError(f"{response.status_code} {response.text[:120]}")
        return parse_count(response.content)

    def close(self) -> None:
        self._main.close()
        self._other.close()


def _bytes(value: str | bytes) -> bytes:
    # A non-ASCII key is sent as its UTF-8 bytes, as a misbehaving client would.
    return value if isinstance(value, bytes) else value.encode("latin-1")


def parse_count(text: bytes) -> int:
    """A count URL's answer: a bare integer, or a JSON object ``{"count": n}``."""
    try:
        data: Any = json.loads(text)
    except ValueError:
        raise ValueError(f"not a number: {text[:120]!r}") from None
    if isinstance(data, dict):
        data = data.get("count")
    if not isinstance(data, int) or isinstance(data, bool):
        raise ValueError(f'expected an integer or {{"count": n}}, got {text[:120]!r}')
    return data
