"""Small helpers shared by the test modules."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connection, connections
from django.test import Client

from idempotency_django._protocol.responses import StoredResponse
from idempotency_django._storage import seal
from tests.testapp.models import Charge


def stored_answer(entry: Any) -> StoredResponse:
    """An entry's stored answer, opened (bodies and headers are sealed at rest)."""
    found = seal.answer_of(entry._state.db or "default", entry)
    assert found is not None, "the entry is still in progress"
    return found


def new_key() -> str:
    return str(uuid.uuid4())


def post(client: Client, path: str, key: str | None, body: Any = None, **extra: Any) -> Any:
    """POST a JSON body with an idempotency key (``None`` sends no header)."""
    headers = {} if key is None else {"Idempotency-Key": key}
    payload = json.dumps(body if body is not None else {"amount": 100})
    return client.post(path, payload, content_type="application/json", headers=headers, **extra)


def charges(reference: str) -> int:
    return Charge.objects.filter(reference=reference).count()


def problem(response: Any) -> dict[str, Any]:
    assert response["Content-Type"] == "application/problem+json"
    data: dict[str, Any] = json.loads(response.content)
    assert set(data) >= {"type", "title", "status", "detail"}
    assert data["status"] == response.status_code
    return data


def race(count: int, work: Callable[[int], Any], timeout: float = 60) -> list[Any]:
    """Run ``work(i)`` on ``count`` real threads released together; return the results."""
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count

    def run(index: int) -> None:
        try:
            barrier.wait(timeout)
            results[index] = work(index)
        except BaseException as exc:
            results[index] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    assert not any(thread.is_alive() for thread in threads), "a racing thread hung"
    return results


@contextmanager
def unreachable_database() -> Iterator[None]:
    """Point the default connection at nothing: the next query can't connect."""
    original = dict(connection.settings_dict)
    connection.close()
    if connection.vendor == "sqlite":
        connection.settings_dict["NAME"] = "/nonexistent-dir/unreachable.sqlite3"
    else:
        connection.settings_dict["PORT"] = 1
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict.update(original)


def duplicate_while_held(
    send: Callable[[str, list[Any]], None],
    key: str,
    inside: threading.Event,
    let_go: threading.Event,
    guard: float,
) -> tuple[Any, Any, bool]:
    """``(first, duplicate, answered_while_held)``: a duplicate sent while the first request
    waits inside its view (``inside`` set) until ``let_go`` is set; nothing here is timed,
    ``guard`` only ends a broken run."""
    first: list[Any] = []
    duplicate: list[Any] = []
    holder = threading.Thread(target=send, args=(key, first))
    holder.start()
    assert inside.wait(guard), "the first request never reached its view"
    other = threading.Thread(target=send, args=(key, duplicate))
    other.start()
    other.join(guard)
    answered_while_held = not other.is_alive()
    let_go.set()
    holder.join(guard)
    other.join(guard)
    return first[0], duplicate[0], answered_while_held
