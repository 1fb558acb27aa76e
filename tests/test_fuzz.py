"""Fuzzing everything a client controls, through Django's WSGI handler with raw environs.

Header values arrive as a WSGI server hands them over (bytes decoded as
Latin-1), so control characters, NULs and 8-bit bytes reach the app. Methods,
bodies and content types are anything. The promises: never a 5xx, never an
entry for a rejected request, never the raw body stored anywhere, and an
accepted key is exactly the key that was sent.
"""

from __future__ import annotations

import io
import json
import string
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pytest
from django.conf import settings
from django.core.handlers.wsgi import WSGIHandler
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.test import override_settings
from django.urls import path
from hypothesis import HealthCheck, event, example, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from idempotency_django import idempotent
from idempotency_django.models import IdempotencyEntry
from tests.helpers import new_key
from tests.testapp.models import Charge

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.test_fuzz")]

PROTECTED = {"POST", "PUT", "PATCH", "DELETE"}
FUZZ = hypothesis_settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def echo_size(request: HttpRequest) -> HttpResponse:
    """A business write and an answer that never contains the request body."""
    key = getattr(getattr(request, "idempotency", None), "key", None) or ""
    Charge.objects.create(reference=key, amount=len(request.body))
    return JsonResponse({"size": len(request.body)}, status=201)


def event_id(request: HttpRequest) -> str | None:
    try:
        data = json.loads(request.body)
    except ValueError:
        return None
    value = data.get("event_id") if isinstance(data, dict) else None
    return value if isinstance(value, str) else None


def form_charge(request: HttpRequest) -> HttpResponse:
    charge = Charge.objects.create(reference="form", amount=int(request.POST["amount"]))
    return JsonResponse({"id": charge.pk}, status=201)


urlpatterns = [
    path("fuzz/", idempotent(echo_size)),
    path("fuzz/webhook/", idempotent(key=event_id)(echo_size)),
    path("fuzz/form/", idempotent(form_charge)),
]


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


def call(
    method: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    content_type: str | None = "application/json",
    target: str = "/fuzz/",
) -> Answer:
    """One request through the whole handler, with the environ a WSGI server would build."""
    route, _, query = target.partition("?")
    environ: dict[str, Any] = {
        "REQUEST_METHOD": method,
        "PATH_INFO": route,
        "QUERY_STRING": query,
        "SERVER_NAME": "testserver",
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": io.StringIO(),
        "wsgi.multithread": False,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
        # A server validates Content-Length; Django trusts it.
        "CONTENT_LENGTH": str(len(body)),
    }
    if content_type is not None:
        environ["CONTENT_TYPE"] = content_type
    for name, value in (headers or {}).items():
        environ["HTTP_" + name.upper().replace("-", "_")] = value
    return _run(WSGIHandler(), environ)


def _run(handler: WSGIHandler, environ: dict[str, Any]) -> Answer:
    started: dict[str, Any] = {}

    def start_response(
        status: str, headers: list[tuple[str, str]], exc_info: Any = None, /
    ) -> Callable[[bytes], object]:
        started.update(status=int(status.split()[0]), headers=dict(headers))
        return lambda data: None

    chunks: Iterable[bytes] = handler(environ, start_response)
    try:
        content = b"".join(chunks)
    finally:
        getattr(chunks, "close", lambda: None)()
    return Answer(started["status"], started["headers"], content)


def reset() -> None:
    IdempotencyEntry.objects.all().delete()
    Charge.objects.all().delete()


def stored_bytes() -> bytes:
    """Every column of every entry, as bytes."""
    blob = bytearray()
    for row in IdempotencyEntry.objects.values_list():
        for value in row:
            if isinstance(value, bytes | memoryview):
                blob += bytes(value)
            else:
                blob += json.dumps(value, default=str, ensure_ascii=False).encode(
                    "utf-8", "replace"
                )
    return bytes(blob)


def assert_body_not_stored(body: bytes, sent_key: str = "") -> None:
    # Shorter bodies occur by chance inside hashes and JSON; the key is the client's own.
    if len(body) >= 16 and body not in sent_key.encode("latin-1", "replace"):
        assert body not in stored_bytes()


def expected_key(raw: str) -> str | None:
    """What an accepted unquoted key must be: the value without surrounding blanks."""
    stripped = raw.strip(" \t")
    return None if stripped.startswith('"') else stripped


def assert_rejected(answer: Answer) -> None:
    assert answer.status == 400
    assert answer.headers["Content-Type"] == "application/problem+json"
    assert not IdempotencyEntry.objects.exists()
    assert not Charge.objects.exists()


# --- keys ------------------------------------------------------------------------------------

LATIN1_HEADER = st.binary(max_size=300).map(lambda raw: raw.decode("latin-1"))
QUOTED = st.text(st.characters(max_codepoint=0xFF), max_size=60).map(lambda s: f'"{s}"')
ESCAPED = st.text(st.sampled_from('ab\\" \t'), max_size=20).map(lambda s: f'"{s}"')
HEADER_VALUES = st.one_of(
    LATIN1_HEADER,
    QUOTED,
    ESCAPED,
    st.text(string.printable, max_size=300),
    st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=250, max_size=260),
)


@FUZZ
@given(raw=HEADER_VALUES)
@example(raw="\x00")
@example(raw=" key\t")
@example(raw="k\r\ney")
@example(raw='"a\\"b"')
@example(raw="x" * 256)
@example(raw="caf\xe9")
def test_any_key_header_is_accepted_exactly_or_rejected_as_400(raw: str) -> None:
    reset()
    answer = call("POST", b'{"amount": 1}', {"Idempotency-Key": raw})
    event(f"status {answer.status}")
    if answer.status != 201:
        assert_rejected(answer)
        return
    entry = IdempotencyEntry.objects.get()
    assert Charge.objects.get().reference == entry.key
    assert all(0x20 <= ord(char) <= 0x7E for char in entry.key)
    if expected_key(raw) is not None:
        assert entry.key == expected_key(raw)


@FUZZ
@given(raw=st.text(max_size=300))
@example(raw="日本")
@example(raw="caf\u00e9")
@example(raw="\u20ac")
def test_key_from_an_extractor_is_taken_exactly_or_rejected(raw: str) -> None:
    """A ``key=`` extractor hands over any text: two different keys must never merge."""
    reset()
    answer = call("POST", json.dumps({"event_id": raw}).encode(), target="/fuzz/webhook/")
    if answer.status != 201:
        assert_rejected(answer)
        return
    key = IdempotencyEntry.objects.get().key
    if expected_key(raw) is not None:
        assert key == expected_key(raw)


# --- methods, bodies, content types ------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
BODIES = st.one_of(
    st.binary(max_size=3000),
    st.text(max_size=500).map(lambda s: s.encode("utf-8", "surrogatepass")),
    st.tuples(JSON_VALUES, st.sampled_from(["utf-8", "utf-16", "utf-32", "latin-1"])).map(
        lambda pair: json.dumps(pair[0], ensure_ascii=False).encode(pair[1], "replace")
    ),
    st.sampled_from(
        [
            b"",
            b"{",
            b'{"a": NaN, "b": -Infinity}',
            b"\xef\xbb\xbf{}",
            b"\xff\xfe\x00{",
            b"[" * 20000 + b"]" * 20000,
            b"9" * 6000,
            b'{"a": "\\ud800"}',
            b'{"a": 1, "a": 2}',
        ]
    ),
)
CONTENT_TYPES = st.one_of(
    st.sampled_from(
        [
            None,
            "",
            "application/json",
            "APPLICATION/JSON ; charset=UTF-8",
            "application/json; charset=utf-16",
            "application/json; charset=no-such-codec",
            "application/problem+json",
            "text/plain; charset=latin-1",
            "application/x-www-form-urlencoded",
            "multipart/form-data",
            "multipart/form-data; boundary=",
            "application/octet-stream",
        ]
    ),
    st.binary(max_size=80).map(lambda raw: raw.decode("latin-1")),
)
# Half protected (in any case), half safe or unknown methods that pass through.
METHODS = st.booleans().flatmap(
    lambda protected: (
        st.sampled_from(["POST", "PUT", "PATCH", "DELETE", "post", "Put"])
        if protected
        else st.sampled_from(["GET", "HEAD", "OPTIONS", "TRACE"])
        | st.text(string.ascii_letters, min_size=1, max_size=12)
    )
)
QUERIES = st.one_of(
    st.just(""), st.binary(max_size=60).map(lambda raw: raw.decode("latin-1").replace("#", ""))
)


@FUZZ
@given(method=METHODS, body=BODIES, content_type=CONTENT_TYPES, query=QUERIES)
def test_any_method_body_and_content_type_is_answered_and_replayed(
    method: str, body: bytes, content_type: str | None, query: str
) -> None:
    reset()
    key = new_key()
    target = f"/fuzz/?{query}"
    answer = call(method, body, {"Idempotency-Key": key}, content_type, target)
    assert answer.status < 500
    protected = method.upper() in PROTECTED
    event(f"{'protected' if protected else 'passed through'}: {answer.status}")
    assert IdempotencyEntry.objects.count() == (1 if protected and answer.status == 201 else 0)
    assert_body_not_stored(body, key)
    if protected and answer.status == 201:
        replay = call(method, body, {"Idempotency-Key": key}, content_type, target)
        assert (replay.status, replay.body) == (201, answer.body)
        assert replay.headers["Idempotent-Replayed"] == "true"
        assert Charge.objects.count() == 1


@pytest.mark.parametrize("content_type", ["application/json", "application/octet-stream", None])
def test_body_over_the_upload_limit_is_400_and_never_claims(content_type: str | None) -> None:
    body = b'{"a": "' + b"x" * settings.DATA_UPLOAD_MAX_MEMORY_SIZE + b'"}'
    answer = call("POST", body, {"Idempotency-Key": new_key()}, content_type)
    assert answer.status == 400
    assert not IdempotencyEntry.objects.exists()
    assert not Charge.objects.exists()


def test_large_body_under_the_limit_is_fingerprinted_not_stored() -> None:
    body = json.dumps({"blob": "y" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE - 100)}).encode()
    key = new_key()
    assert call("POST", body, {"Idempotency-Key": key}).status == 201
    assert call("POST", body, {"Idempotency-Key": key}).headers["Idempotent-Replayed"] == "true"
    assert_body_not_stored(body[:4096])
    assert Charge.objects.count() == 1


# --- a form post through CSRF protection ---------------------------------------------------------

CSRF_MIDDLEWARE = [*settings.MIDDLEWARE, "django.middleware.csrf.CsrfViewMiddleware"]
BOUNDARY = "fuzzboundary"


def multipart(fields: dict[str, str]) -> bytes:
    parts = [
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
        for name, value in fields.items()
    ]
    return ("".join(parts) + f"--{BOUNDARY}--\r\n").encode()


@override_settings(MIDDLEWARE=CSRF_MIDDLEWARE)
@pytest.mark.parametrize(
    "content_type",
    [f"multipart/form-data; boundary={BOUNDARY}", "application/x-www-form-urlencoded"],
)
def test_form_post_checked_by_csrf_before_the_view_is_protected(content_type: str) -> None:
    """CsrfViewMiddleware reads request.POST first: the fingerprint must still see the body."""
    token = "t" * 32
    fields = {"csrfmiddlewaretoken": token, "amount": "7"}
    body = (
        multipart(fields)
        if content_type.startswith("multipart")
        else b"".join(f"{n}={v}&".encode() for n, v in fields.items())
    )
    headers = {"Idempotency-Key": new_key(), "Cookie": f"csrftoken={token}"}
    first = call("POST", body, headers, content_type, "/fuzz/form/")
    replay = call("POST", body, headers, content_type, "/fuzz/form/")
    other = call("POST", body.replace(b"7", b"8"), headers, content_type, "/fuzz/form/")
    assert first.status == 201
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert other.status == 422
    assert Charge.objects.get().amount == 7
