"""Under ASGI, a protected async view never blocks the event loop on the database.

Requests go through Django's real ``ASGIHandler`` on one event loop (as one
uvicorn worker serves them). While a protected request is in its view, and
while a duplicate of it waits for its answer (``wait=``, the protocol polling
the database), another request on the same loop keeps answering.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from typing import Any

import pytest
from django.core.handlers.asgi import ASGIHandler

from tests.helpers import charges, new_key
from tests.testapp.ninja_api import held

pytestmark = pytest.mark.django_db(transaction=True)


async def asgi(
    app: ASGIHandler,
    method: str,
    path: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """One HTTP request through the ASGI app; returns (status, headers, body)."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    incoming = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[Mapping[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if incoming:
            return incoming.pop()
        await asyncio.Event().wait()  # the client never disconnects
        raise AssertionError  # pragma: no cover

    async def send(message: Mapping[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    start = sent[0]
    response_headers = {k.decode().lower(): v.decode() for k, v in start["headers"]}
    return start["status"], response_headers, b"".join(m.get("body", b"") for m in sent[1:])


@pytest.mark.parametrize("path", ["/ninja/async/held", "/adrf/held/"])
def test_the_loop_keeps_answering_while_a_protected_request_is_in_its_view(path: str) -> None:
    key = new_key()
    body = json.dumps({"amount": 7}).encode()
    headers = {"Idempotency-Key": key, "Content-Type": "application/json"}
    pings: list[float] = []

    async def scenario() -> tuple[Any, Any]:
        app = ASGIHandler()
        entered = held[f"{key}:entered"] = asyncio.Event()
        release = held[f"{key}:release"] = asyncio.Event()
        first = asyncio.create_task(asgi(app, "POST", path, body, headers))
        await asyncio.wait_for(entered.wait(), 30)
        # The first holds its claim, its transaction open; a duplicate waits for its answer.
        duplicate = asyncio.create_task(asgi(app, "POST", path, body, headers))
        for _ in range(5):
            started = time.monotonic()
            status, _headers, pong = await asyncio.wait_for(
                asgi(app, "GET", "/ninja/async/ping"), 10
            )
            pings.append(time.monotonic() - started)
            assert (status, json.loads(pong)) == (200, {"pong": "yes"})
            await asyncio.sleep(0.05)
        assert not first.done()
        assert not duplicate.done()
        release.set()
        return await asyncio.wait_for(first, 30), await asyncio.wait_for(duplicate, 30)

    try:
        (status, _, content), (dup_status, dup_headers, dup_content) = asyncio.run(scenario())
    finally:
        held.clear()
    assert status == 201
    assert (dup_status, dup_content) == (201, content), content
    assert dup_headers["idempotent-replayed"] == "true"
    assert charges(key) == 1
    print(f"\nping while held: max {max(pings) * 1000:.1f} ms over {len(pings)}")
    assert max(pings) < 5
