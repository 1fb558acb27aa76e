"""Assertions for your own test suites: is my view really safe to retry?

Work with Django's test ``Client`` and DRF's ``APIClient``, under pytest (plain
functions) or unittest (:class:`IdempotencyAssertionsMixin` for ``TestCase``)::

    from idempotency_django.testing import assert_replays

    def test_paying_twice_charges_once(client):
        assert_replays(client, "/pay/", {"amount": 1000}, executions=Charge.objects.count)

Failures raise ``AssertionError`` with what was expected and what came back;
they never rely on ``assert`` statements, so ``python -O`` keeps them.
"""

from __future__ import annotations

import copy
import json
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from idempotency_django.conformance.scenarios import (
    KEY_FORMATS,
    PROFILES,
    Answer,
    Options,
    Result,
    failures,
    run_scenarios,
)
from idempotency_django.exceptions import (
    PROBLEM_BASE,
    IdempotencyError,
    KeyMalformed,
    KeyMissing,
    KeyReused,
    RequestInProgress,
)

__all__ = [
    "IdempotencyAssertionsMixin",
    "Replay",
    "assert_conformance",
    "assert_in_progress",
    "assert_key_malformed",
    "assert_key_missing",
    "assert_key_reused",
    "assert_problem",
    "assert_replayed",
    "assert_replays",
    "new_key",
    "run_conformance",
    "send",
]

JSON = "application/json"
PROBLEM = "application/problem+json"
REPLAYED = "Idempotent-Replayed"
Executions = Callable[[], int]


@dataclass(frozen=True)
class Replay:
    """What :func:`assert_replays` sent and got: the key, the first answer and its replay."""

    key: str
    first: Any
    second: Any


def new_key() -> str:
    """A fresh idempotency key."""
    return str(uuid.uuid4())


def send(
    client: Any,
    path: str,
    data: Any = None,
    *,
    key: str | None,
    method: str = "post",
    content_type: str | None = JSON,
    header: str | None = None,
    **extra: Any,
) -> Any:
    """One request through a Django or DRF test client, carrying ``key`` (``None``: no key).

    ``data`` is sent as JSON by default; ``content_type=None`` lets the client encode it
    as a form. ``header`` defaults to ``IDEMPOTENCY_HEADER``; ``extra`` goes to the client.
    """
    if key is not None:
        extra[_meta_name(header)] = key
    if content_type is None:
        return getattr(client, method.lower())(path, data, **extra)
    body = data if isinstance(data, str | bytes) or data is None else _json(data, content_type)
    return getattr(client, method.lower())(path, body or "", content_type=content_type, **extra)


def assert_replays(
    client: Any,
    path: str,
    data: Any = None,
    *,
    executions: Executions | None = None,
    key: str | None = None,
    method: str = "post",
    content_type: str | None = JSON,
    header: str | None = None,
    **extra: Any,
) -> Replay:
    """Send one keyed request twice; assert the second is the first's replay.

    The second answer must carry ``Idempotent-Replayed: true``, the first's status and
    its body byte for byte. ``executions`` is a callable counting the view's effects
    (e.g. ``Charge.objects.count``): it must grow by exactly one across both requests.
    """
    key = new_key() if key is None else key
    before = executions() if executions is not None else 0
    options: dict[str, Any] = {"method": method, "content_type": content_type, "header": header}
    first = send(client, path, data, key=key, **options, **extra)
    second = send(client, path, data, key=key, **options, **extra)
    assert_replayed(first, second)
    if executions is not None:
        _expect(executions() - before == 1, f"executions grew by {executions() - before}, not 1")
    return Replay(key, first, second)


def assert_replayed(first: Any, second: Any) -> None:
    """``second`` replays ``first``: same status, byte-identical body, the replay header."""
    _expect(
        first.headers.get(REPLAYED) is None,
        f"the first answer is already a replay: was this key used before?{_show(first)}",
    )
    _expect(
        second.headers.get(REPLAYED) == "true",
        f"the second answer has no '{REPLAYED}: true' header{_show(second)}",
    )
    _expect(
        second.status_code == first.status_code,
        f"replayed status {second.status_code} differs from the first {first.status_code}",
    )
    _expect(
        second.content == first.content,
        f"the replayed body differs from the first:\n{first.content!r}\n{second.content!r}",
    )


def assert_problem(response: Any, status: int, code: str | None = None) -> dict[str, Any]:
    """An RFC 9457 problem answer with ``status`` (and problem ``code``); returns its fields."""
    _expect(response.status_code == status, f"expected {status}{_show(response)}")
    content_type = response.headers.get("Content-Type", "")
    _expect(content_type == PROBLEM, f"expected {PROBLEM}, got {content_type!r}")
    problem = json.loads(response.content)
    _expect(isinstance(problem, dict), f"a problem is a JSON object, got {problem!r}")
    missing = {"type", "title", "status", "detail"} - set(problem)
    _expect(not missing, f"the problem lacks {sorted(missing)}: {problem!r}")
    _expect(problem["status"] == status, f"the problem's status is {problem['status']!r}")
    if code is not None:
        _expect(
            str(problem["type"]) == PROBLEM_BASE + code, f"expected a {code!r} problem: {problem!r}"
        )
    return dict(problem)


def assert_in_progress(response: Any) -> dict[str, Any]:
    """409: the key is held by a request still running; ``Retry-After`` says when to retry."""
    problem = _assert_error(response, RequestInProgress)
    retry_after = response.headers.get("Retry-After", "")
    _expect(retry_after.isdigit(), f"a 409 needs Retry-After in seconds, got {retry_after!r}")
    return problem


def assert_key_reused(response: Any) -> dict[str, Any]:
    """422: the key was used before with a different request."""
    return _assert_error(response, KeyReused)


def assert_key_missing(response: Any) -> dict[str, Any]:
    """400: the view requires a key and the request carried none."""
    return _assert_error(response, KeyMissing)


def assert_key_malformed(response: Any) -> dict[str, Any]:
    """400: the key is empty, too long or not visible ASCII."""
    return _assert_error(response, KeyMalformed)


class IdempotencyAssertionsMixin:
    """The same assertions as methods, for ``django.test.TestCase`` (uses ``self.client``)."""

    client: Any

    def assertReplays(self, path: str, data: Any = None, **kwargs: Any) -> Replay:
        return assert_replays(self.client, path, data, **kwargs)

    def assertReplayed(self, first: Any, second: Any) -> None:
        assert_replayed(first, second)

    def assertProblem(self, response: Any, status: int, code: str | None = None) -> dict[str, Any]:
        return assert_problem(response, status, code)

    def assertInProgress(self, response: Any) -> dict[str, Any]:
        return assert_in_progress(response)

    def assertKeyReused(self, response: Any) -> dict[str, Any]:
        return assert_key_reused(response)

    def assertKeyMissing(self, response: Any) -> dict[str, Any]:
        return assert_key_missing(response)

    def assertKeyMalformed(self, response: Any) -> dict[str, Any]:
        return assert_key_malformed(response)


def _assert_error(response: Any, error: type[IdempotencyError]) -> dict[str, Any]:
    return assert_problem(response, error.status, error.code)


def _meta_name(header: str | None) -> str:
    if header is None:
        from idempotency_django._conf import conf

        header = conf.HEADER
    return "HTTP_" + header.upper().replace("-", "_")


def _json(data: Any, content_type: str) -> Any:
    # Encoded here: DRF's APIClient would send str(dict) when given a content type.
    return json.dumps(data) if "json" in content_type else data


def _show(response: Any) -> str:
    body = bytes(response.content[:300]).decode("utf-8", "replace")
    return f"\n  got {response.status_code} {body}"


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


# --- the conformance scenarios, in process -------------------------------------------------------


def run_conformance(
    client: Any,
    path: str,
    *,
    body: Mapping[str, Any] | None = None,
    id_field: str = "id",
    other_client: Any = None,
    executions: Executions | None = None,
    header: str | None = None,
    only: Sequence[str] | None = None,
    patience: float = 10.0,
    profile: str = "strict",
    key_format: str = "token",
) -> list[Result]:
    """Run the conformance scenarios (docs/verify.rst) on ``path`` through ``client``.

    ``other_client`` is a second caller (other credentials): without it, the
    ``other-caller`` scenario is not run. ``executions`` counts the view's effects
    (e.g. ``Charge.objects.count``), read before and after each scenario: "nothing ran"
    is then exact; without it only integer ids that grow count executions, and on a
    view with other ids the scenarios resting on counting are ``not run``. ``profile``
    is ``"strict"`` (this library's contract) or ``"draft"`` (the IETF draft's
    requirements; its recommendations become ``Result.warnings``); ``key_format``
    ``"token"`` or ``"uuid"`` (plain UUIDs). Concurrent scenarios
    (the storm, an in-flight duplicate) need a test that commits (``transaction=True``);
    inside a ``TestCase`` the storm runs sequentially and the in-flight one is not run.
    """
    from idempotency_django._conf import conf

    transport = ClientTransport(client, path, other_client)
    if profile not in PROFILES or key_format not in KEY_FORMATS:
        raise ValueError(f"profile is one of {PROFILES}, key_format one of {KEY_FORMATS}")
    options = Options(
        id_field=id_field,
        executions=executions,
        header=header or conf.HEADER,
        patience=patience,
        profile=profile,
        key_format=key_format,
    )
    if body is not None:
        options.body = dict(body)
    return run_scenarios(transport, options, only)


def assert_conformance(client: Any, path: str, **kwargs: Any) -> list[Result]:
    """:func:`run_conformance`, raising ``AssertionError`` with the evidence of every failure."""
    results = run_conformance(client, path, **kwargs)
    failed = list(failures(results))  # a runner's error fails the test too
    lines = [f"{r.name}: " + "; ".join(r.evidence) for r in failed]
    _expect(not failed, "conformance scenarios failed:\n" + "\n".join(lines))
    return results


class ClientTransport:
    """Scenarios' requests through a Django (or DRF) test client, in this process.

    Threads other than the creating one send through a copy of the client (same
    credentials and cookies) and close their database connections after each request.
    """

    in_process = True

    def __init__(self, client: Any, path: str, other_client: Any = None) -> None:
        self.client, self.path, self.other_client = client, path, other_client
        self.has_other_caller = other_client is not None
        self._owner = threading.get_ident()

    @property
    def concurrent(self) -> bool:
        from django.db import connections

        return not any(connections[alias].in_atomic_block for alias in connections)

    def send(self, headers: Mapping[str, str | bytes], body: bytes, *, other: bool = False) -> Any:
        client = self.other_client if other else self.client
        if threading.get_ident() == self._owner:
            return _answer(_post(client, self.path, headers, body))
        from django.db import connections

        try:
            return _answer(_post(_copy(client), self.path, headers, body))
        finally:
            connections.close_all()


def _post(client: Any, path: str, headers: Mapping[str, str | bytes], body: bytes) -> Any:
    fields = {name: _wsgi(value) for name, value in headers.items() if name != "Content-Type"}
    content_type = str(headers.get("Content-Type", JSON))
    return client.post(path, body, content_type=content_type, headers=fields)


def _wsgi(value: str | bytes) -> str:
    # A WSGI server hands Django header bytes decoded as latin-1: do the same.
    return value.decode("latin-1") if isinstance(value, bytes) else value


def _copy(client: Any) -> Any:
    clone = copy.copy(client)
    clone.cookies = copy.copy(client.cookies)
    return clone


def _answer(response: Any) -> Answer:
    headers = {name.lower(): value for name, value in response.headers.items()}
    return Answer(response.status_code, headers, bytes(response.content))
