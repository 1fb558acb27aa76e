"""The Python client's rules without a server: keys, which answers are retried, and the budgets.

httpx's ``MockTransport`` and a stubbed ``HTTPAdapter.send`` stand in for the network;
the real server and lost answers are in ``tests/system/test_client_faults.py``.
"""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
import requests
from hypothesis import given
from hypothesis import strategies as st
from requests.adapters import HTTPAdapter

from idempotency_django import client
from idempotency_django.client import (
    AsyncIdempotentTransport,
    IdempotentAdapter,
    IdempotentTransport,
    RetriesExhausted,
    RetryPolicy,
    uuid7,
)
from idempotency_django.client.policy import retry_after_seconds, retryable_status
from idempotency_django.exceptions import PROBLEM_BASE


class Clock:
    def __init__(self) -> None:
        self.sleeps: list[float] = []
        self.now = 0.0

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    async def async_sleep(self, seconds: float) -> None:
        self.sleep(seconds)

    def policy(self, **options: Any) -> RetryPolicy:
        return RetryPolicy(
            sleep=self.sleep, async_sleep=self.async_sleep, clock=lambda: self.now, **options
        )


def scripted(*outcomes: int | Exception) -> tuple[list[httpx.Request], httpx.MockTransport]:
    """A transport answering each request with the next status, or raising the next error."""
    seen: list[httpx.Request] = []
    pending = list(outcomes)

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        outcome = pending.pop(0) if pending else 200
        if isinstance(outcome, Exception):
            raise outcome
        return httpx.Response(outcome, headers={"Retry-After": "1"} if outcome == 429 else {})

    return seen, httpx.MockTransport(handler)


def test_uuid7_follows_rfc_9562() -> None:
    before = datetime.now(UTC).timestamp() * 1000
    keys = [uuid7() for _ in range(50)]
    assert all(k.version == 7 and k.variant == uuid.RFC_4122 for k in keys)
    assert int(before) - 1 <= keys[0].int >> 80 <= int(before) + 60_000
    assert len(set(keys)) == 50
    assert [k.int >> 80 for k in keys] == sorted(k.int >> 80 for k in keys)


def test_the_key_is_kept_across_connect_errors_timeouts_and_5xx() -> None:
    clock = Clock()
    seen, mock = scripted(httpx.ConnectError("refused"), httpx.ReadTimeout("slow"), 500, 201)
    with httpx.Client(transport=IdempotentTransport(mock, policy=clock.policy())) as http:
        got = http.post("http://test/charges/", content=b"{}")
    assert got.status_code == 201
    keys = {r.headers["Idempotency-Key"] for r in seen}
    assert keys == {got.extensions["idempotency_key"]}
    assert got.extensions["idempotency_attempts"] == 4
    assert len(clock.sleeps) == 3


def test_a_caller_key_is_used_and_safe_methods_pass_through_once() -> None:
    seen, mock = scripted(503, 200, 503)
    with httpx.Client(transport=IdempotentTransport(mock, policy=Clock().policy())) as http:
        put = http.put("http://test/x", headers={"Idempotency-Key": "mine"})
        got = http.get("http://test/x")
    assert put.extensions["idempotency_key"] == "mine"
    assert got.status_code == 503
    assert "Idempotency-Key" not in seen[-1].headers


@pytest.mark.parametrize("status", [400, 401, 403, 404, 410, 412, 422, 428])
def test_a_final_4xx_is_returned_at_once(status: int) -> None:
    clock = Clock()
    seen, mock = scripted(status)
    with httpx.Client(transport=IdempotentTransport(mock, policy=clock.policy())) as http:
        assert http.delete("http://test/x").status_code == status
    assert (len(seen), clock.sleeps) == (1, [])


def test_429_is_retried_as_its_retry_after_says() -> None:
    clock = Clock()
    _, mock = scripted(429, 429)
    with httpx.Client(transport=IdempotentTransport(mock, policy=clock.policy())) as http:
        assert http.patch("http://test/x").status_code == 200
    assert clock.sleeps == [1, 1]


def test_no_attempt_starts_past_the_time_budget() -> None:
    clock = Clock()
    _, mock = scripted(*[httpx.ConnectError("refused")] * 10)
    policy = clock.policy(max_attempts=10, max_time=3, backoff=2, random=lambda: 1.0)
    with (
        httpx.Client(transport=IdempotentTransport(mock, policy=policy)) as http,
        pytest.raises(RetriesExhausted) as raised,
    ):
        http.post("http://test/x")
    assert clock.sleeps == [2]  # the next wait (4) would end past 3 s
    assert raised.value.status is None
    assert "out of time" in str(raised.value)
    assert "ConnectError" in raised.value.reason


def test_the_async_transport_shares_the_rules() -> None:
    clock = Clock()
    seen: list[httpx.Request] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if len(seen) == 2:  # the POST's first attempt, after the GET
            raise httpx.RemoteProtocolError("Server disconnected")
        return httpx.Response(201 if len(seen) == 4 else 503)

    async def run() -> httpx.Response:
        transport = AsyncIdempotentTransport(httpx.MockTransport(handler), policy=clock.policy())
        async with httpx.AsyncClient(transport=transport) as http:
            await http.get("http://test/")
            return await http.post("http://test/", content=b"x")

    got = asyncio.run(run())
    assert got.status_code == 201
    assert len({r.headers["Idempotency-Key"] for r in seen[1:]}) == 1
    assert "Idempotency-Key" not in seen[0].headers
    assert len(clock.sleeps) == 2


def _stub_send(
    monkeypatch: pytest.MonkeyPatch, *outcomes: int | Exception, header: str = "Idempotency-Key"
) -> list[str]:
    """Stub the network; the ``header`` each attempt carried (``"None"`` when absent)."""
    keys: list[str] = []
    pending = list(outcomes)

    def send(self: HTTPAdapter, request: requests.PreparedRequest, **kwargs: Any) -> Any:
        keys.append(str(request.headers.get(header)))
        outcome = pending.pop(0) if pending else 200
        if isinstance(outcome, Exception):
            raise outcome
        response = requests.Response()
        response.status_code, response.request = outcome, request
        response.raw = io.BytesIO(b"")
        return response

    monkeypatch.setattr(HTTPAdapter, "send", send)
    return keys


def test_requests_retries_connection_errors_with_one_key(monkeypatch: pytest.MonkeyPatch) -> None:
    keys = _stub_send(monkeypatch, requests.ConnectionError("reset"), requests.ReadTimeout(), 504)
    with requests.Session() as session:
        session.mount("http://", IdempotentAdapter(policy=Clock().policy()))
        got = session.post("http://test/x", data=b"{}")
        session.get("http://test/x")
    assert got.status_code == 200
    assert len(set(keys[:4])) == 1
    assert got.request.headers["Idempotency-Key"] == keys[0]
    assert keys[4] == "None"


def test_requests_sends_a_one_shot_body_once(monkeypatch: pytest.MonkeyPatch) -> None:
    keys = _stub_send(monkeypatch, 503, requests.ConnectionError("reset"))
    with requests.Session() as session:
        session.mount("http://", IdempotentAdapter(policy=Clock().policy()))
        assert session.post("http://test/x", data=iter([b"a"])).status_code == 503
        with pytest.raises(requests.ConnectionError):
            session.post("http://test/x", data=iter([b"a"]))
    assert len(keys) == 2


def test_retry_after_as_a_date_and_garbage() -> None:
    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert retry_after_seconds("Thu, 01 Jan 2026 12:00:30 GMT", lambda: now) == 30
    assert retry_after_seconds("Thu, 01 Jan 2026 11:00:00 GMT", lambda: now) == 0
    assert retry_after_seconds("Thu, 01 Jan 2026 12:00:30 -0000", lambda: now) == 30
    assert retry_after_seconds("Thu, 01 Jan 2015 11:00:00 GMT") == 0
    assert retry_after_seconds("soon") is None
    assert retry_after_seconds(None) is None
    assert [retryable_status(s) for s in (409, 599, 422)] == [True, True, False]


def test_a_bad_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ValueError, match="backoff"):
        RetryPolicy(backoff=-1)
    assert RetryPolicy(methods=frozenset({"post"})).applies("POST")


def test_only_the_library_asked_for_is_imported() -> None:
    with pytest.raises(AttributeError, match="Nope"):
        client.Nope  # noqa: B018
    code = (
        "import sys; sys.modules['httpx'] = None; sys.modules['requests'] = None\n"
        "import idempotency_django, idempotency_django.client as c\n"
        "print(c.new_key())"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert uuid.UUID(done.stdout.strip()).version == 7


def test_it_gives_up_after_its_attempts_when_no_answer_comes() -> None:
    _, mock = scripted(*[httpx.ConnectError("refused")] * 3)
    policy = Clock().policy(max_attempts=3)
    with (
        httpx.Client(transport=IdempotentTransport(mock, policy=policy)) as http,
        pytest.raises(RetriesExhausted, match="no attempts left") as raised,
    ):
        http.post("http://test/x", headers={"Idempotency-Key": "k-1"})
    assert (raised.value.key, raised.value.attempts) == ("k-1", 3)


def test_requests_keeps_a_key_given_as_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    keys = _stub_send(monkeypatch, 503)
    with requests.Session() as session:
        session.mount("http://", IdempotentAdapter(policy=Clock().policy()))
        got = session.delete("http://test/x", headers={"Idempotency-Key": b"mine"})
    assert got.status_code == 200
    assert keys == ["mine", "mine"]


@pytest.mark.parametrize(
    ("name", "module", "missing", "extra"),
    [
        ("IdempotentTransport", "idempotency_django.client._httpx", "httpx", "httpx"),
        ("IdempotentAdapter", "idempotency_django.client._requests", "requests", "requests"),
    ],
)
def test_a_client_without_its_library_says_what_to_install(
    name: str, module: str, missing: str, extra: str
) -> None:
    code = (
        f"import sys; sys.modules[{missing!r}] = None\n"
        "import idempotency_django.client as c\n"
        "try:\n"
        f"    c.{name}\n"
        "except ModuleNotFoundError as error:\n"
        "    print(error)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.stdout.strip() == (
        f"{module} needs {missing}, which is not installed: pip install 'idempotency-django[{extra}]'"
    )


def test_requests_marks_its_retries_and_not_its_first_attempt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    marks = _stub_send(
        monkeypatch, requests.ConnectionError("reset"), 503, 201, header="Idempotency-Retry"
    )
    with requests.Session() as session:
        session.mount("http://", IdempotentAdapter(policy=Clock().policy()))
        assert session.post("http://test/charges/", data=b"{}").status_code == 201
    assert marks == ["None", "1", "2"]


@pytest.mark.parametrize(
    "value",
    [
        "²",
        "\u0661\u0662",  # Arabic-Indic digits: float() takes them, RFC 9110 does not
        "1.5",
        "-1",
        "+3",
        "0x10",
        "1 2",
        "3s",
        "",
        " ",
        "\x00",
        "Thu, 99 Jan 2026 12:00:30 GMT",
    ],
)
def test_a_retry_after_that_is_neither_delta_seconds_nor_an_http_date_is_ignored(
    value: str,
) -> None:
    assert retry_after_seconds(value) is None


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("7", 7),
        (" 7\t", 7),  # optional whitespace around a field value (RFC 9110 §5.5)
        ("007", 7),
        ("Thu, 01 Jan 2026 12:00:30 GMT", 30),  # IMF-fixdate
        ("Thursday, 01-Jan-26 12:00:30 GMT", 30),  # obsolete RFC 850
        ("Thu Jan  1 12:00:30 2026", 30),  # obsolete asctime()
    ],
)
def test_retry_after_is_read_as_rfc_9110_says(value: str, seconds: float) -> None:
    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert retry_after_seconds(value, lambda: now) == seconds


@given(st.text())
def test_no_retry_after_value_raises(value: str) -> None:
    seconds = retry_after_seconds(value)
    assert seconds is None or seconds >= 0


def test_a_retry_after_of_unicode_digits_is_backed_off_not_raised() -> None:
    clock = Clock()
    calls: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(503, headers=[(b"Retry-After", "²".encode())])

    policy = clock.policy(max_attempts=3, backoff=1, random=lambda: 1.0)
    with (
        httpx.Client(
            transport=IdempotentTransport(httpx.MockTransport(handler), policy=policy)
        ) as http,
        pytest.raises(RetriesExhausted) as raised,
    ):
        http.post("http://test/x", headers={"Idempotency-Key": "k-2"})
    assert (raised.value.key, len(calls), clock.sleeps) == ("k-2", 3, [1, 2])


@pytest.mark.parametrize("code", ["answer-too-large", "answer-unreadable"])
def test_a_problem_whose_type_says_it_is_final_is_not_retried(code: str) -> None:
    clock = Clock()
    calls: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return final_problem(code)

    transport = IdempotentTransport(httpx.MockTransport(handler), policy=clock.policy())
    with httpx.Client(transport=transport) as http:
        got = http.post("http://test/x", content=b"{}")
    assert (got.status_code, len(calls), clock.sleeps) == (500, 1, [])
    assert got.json()["type"].endswith(f"#{code}")
    assert got.extensions["idempotency_attempts"] == 1


def test_the_async_transport_and_requests_do_not_retry_a_final_problem_either(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        calls.append("httpx")
        return final_problem("answer-too-large")

    async def run() -> httpx.Response:
        mock = httpx.MockTransport(handler)
        transport = AsyncIdempotentTransport(mock, policy=Clock().policy())
        async with httpx.AsyncClient(transport=transport) as http:
            return await http.post("http://test/", content=b"x")

    assert asyncio.run(run()).status_code == 500

    def send(self: HTTPAdapter, request: requests.PreparedRequest, **kwargs: Any) -> Any:
        calls.append("requests")
        response = requests.Response()
        problem = final_problem("answer-unreadable")
        response.status_code, response.request = 500, request
        response.headers.update(problem.headers)
        response.raw = io.BytesIO(problem.content)
        return response

    monkeypatch.setattr(HTTPAdapter, "send", send)
    with requests.Session() as session:
        session.mount("http://", IdempotentAdapter(policy=Clock().policy()))
        got = session.post("http://test/x", data=b"{}")
    assert (got.status_code, got.json()["status"]) == (500, 500)
    assert calls == ["httpx", "requests"]


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("application/problem+json", {"type": "about:blank", "status": 500}),
        ("application/problem+json", {"type": "https://example.com/answer-too-large"}),
        ("application/json", {"type": PROBLEM_BASE + "answer-too-large"}),
        ("application/problem+json", ["not", "an", "object"]),
        ("application/problem+json", None),  # unparsable
    ],
)
def test_any_other_5xx_is_still_retried(content_type: str, body: object) -> None:
    clock = Clock()
    calls: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if len(calls) > 1:
            return httpx.Response(201)
        content = b"{not json" if body is None else json.dumps(body).encode()
        return httpx.Response(500, headers={"Content-Type": content_type}, content=content)

    transport = IdempotentTransport(httpx.MockTransport(handler), policy=clock.policy())
    with httpx.Client(transport=transport) as http:
        assert http.post("http://test/x").status_code == 201
    assert len(calls) == 2


def test_a_policy_may_name_more_final_problems() -> None:
    mine = "https://api.example.com/problems/card-declined-upstream"
    policy = Clock().policy(final_problems=RetryPolicy().final_problems | {mine})

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            502, headers={"Content-Type": "application/problem+json"}, json={"type": mine}
        )

    transport = IdempotentTransport(httpx.MockTransport(handler), policy=policy)
    with httpx.Client(transport=transport) as http:
        assert http.post("http://test/x").extensions["idempotency_attempts"] == 1


def final_problem(code: str) -> httpx.Response:
    """The server's own answer for ``code`` (responses.problem_response's shape)."""
    body = {"type": PROBLEM_BASE + code, "title": "t", "status": 500, "detail": "d"}
    headers = {"Content-Type": "application/problem+json"}
    return httpx.Response(500, headers=headers, content=json.dumps(body).encode())


@pytest.mark.parametrize(
    "outcome", [httpx.ConnectError("refused"), 503], ids=["no answer", "an answer"]
)
def test_the_given_up_message_says_no_attempts_left_once(outcome: int | Exception) -> None:
    _, mock = scripted(*[outcome] * 2)
    with (
        httpx.Client(
            transport=IdempotentTransport(mock, policy=Clock().policy(max_attempts=2))
        ) as http,
        pytest.raises(RetriesExhausted) as raised,
    ):
        http.post("http://test/x", headers={"Idempotency-Key": "k-3"})
    message = str(raised.value)
    assert message.count("no attempts left") == 1, message
    assert message.count("503") == (1 if outcome == 503 else 0), message
    assert "'k-3'" in message
