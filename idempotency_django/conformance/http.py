"""The black-box transport: real HTTP through httpx, one connection pool per caller.

What the network does is never judged as the server's answer: a request that fails on a
kept-alive connection the server closed or reset (uvicorn closes after an unhandled
exception's 500, racing the next request) is sent once more on a new connection, and a
request outlasting the timeout raises :class:`TimedOut`, naming ``--timeout``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

import httpx

from idempotency_django.conformance.scenarios import Answer, TimedOut

TIMEOUT = 30.0  # seconds per request: a held request holds for a few, nothing needs more
# Failures of the connection, not answers: worth one more try on a new connection.
DROPPED = (httpx.NetworkError, httpx.RemoteProtocolError)


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
        self.url, self.timeout = url, timeout
        self.has_other_caller = bool(other_headers)
        self._limits = httpx.Limits(
            max_connections=connections, max_keepalive_connections=connections
        )
        self._main = self._client(headers)
        self._other = self._client(other_headers or {})

    def _client(
        self, headers: Mapping[str, str], limits: httpx.Limits | None = None
    ) -> httpx.Client:
        return httpx.Client(
            headers=dict(headers), timeout=self.timeout, limits=limits or self._limits
        )

    def send(
        self, headers: Mapping[str, str | bytes], body: bytes, *, other: bool = False
    ) -> Answer:
        encoded = {name.encode(): _bytes(value) for name, value in headers.items()}
        client = self._other if other else self._main
        try:
            response, note = self._request(client, "POST", self.url, encoded, body)
        except httpx.HTTPError as error:
            return Answer(0, {}, b"", f"{type(error).__name__}: {error}")
        found = {name.lower(): value for name, value in response.headers.items()}
        return Answer(response.status_code, found, response.content, note=note)

    def count(self, url: str) -> int:
        """GET ``url`` as the main caller: the effects so far (``ValueError`` if unreadable)."""
        try:
            response, _ = self._request(self._main, "GET", url)
            if response.status_code != 200:
                raise ValueError(f"{response.status_code} {response.text[:120]}")
            return parse_count(response.content)
        except (httpx.HTTPError, TimedOut, ValueError) as error:
            reason = str(error) if isinstance(error, ValueError) else _named(error)
            raise ValueError(f"--count-url {url}: {reason}") from None

    def _request(
        self,
        client: httpx.Client,
        method: str,
        url: str,
        headers: Mapping[bytes, bytes] | None = None,
        body: bytes | None = None,
    ) -> tuple[httpx.Response, str]:
        """The response, and a note when it came on a new connection after a dropped one."""
        start = time.monotonic()
        try:
            try:
                return client.request(method, url, content=body, headers=headers), ""
            except DROPPED as error:
                dropped = _named(error)
            with self._client(client.headers, httpx.Limits(max_keepalive_connections=0)) as fresh:
                response = fresh.request(method, url, content=body, headers=headers)
                return response, f"on a new connection, the first dropped: {dropped}"
        except httpx.TimeoutException as error:
            took = time.monotonic() - start
            raise TimedOut(
                f"no answer within --timeout {self.timeout:g} s ({_named(error)} after "
                f"{took:.1f} s): a slow server or a busy machine; raise --timeout SECONDS"
            ) from None

    def close(self) -> None:
        self._main.close()
        self._other.close()


def _named(error: Exception) -> str:
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


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
