"""The fingerprint API the core builds on: keyed hashes, snapshots, and call arguments."""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pytest
from django.core.exceptions import RequestDataTooBig
from django.core.files.uploadedfile import SimpleUploadedFile
from django.http import HttpRequest
from django.http.request import RawPostDataException
from django.test import RequestFactory, override_settings
from django.test.client import encode_multipart
from hypothesis import given
from hypothesis import strategies as st

from idempotency_django._protocol.fingerprint import (
    Keyed,
    RequestSnapshot,
    arguments_digest,
    bound_arguments,
    digest,
    keyed,
    request_fingerprint,
    signature_of,
    snapshot,
)

factory = RequestFactory()
CARD = json.dumps({"card": "424242******4242", "amount": 100})
OLD, NEW = "the-old-secret-key", "the-new-secret-key"


def charge(body: str = CARD) -> HttpRequest:
    return factory.post("/charges/", body, content_type="application/json")


def form_post(boundary: str, data: dict[str, Any], method: str = "post") -> HttpRequest:
    content_type = f"multipart/form-data; boundary={boundary}"
    request: HttpRequest = getattr(factory, method)(
        "/up/", encode_multipart(boundary, data), content_type
    )
    return request


# --- keyed ---------------------------------------------------------------------------------------


def test_item4_stored_fingerprint_is_an_hmac_under_the_secret_key() -> None:
    canonical = request_fingerprint(charge())
    with override_settings(SECRET_KEY=OLD, SECRET_KEY_FALLBACKS=[]):
        stored = keyed(canonical)
    assert len(stored.current) == 64
    int(stored.current, 16)
    assert stored.accepted == {stored.current}
    # Recomputable only with the secret: candidates hashed without it never reach it.
    candidates = [
        request_fingerprint(charge(CARD.replace("******", f"{n:06d}"))) for n in range(200)
    ]
    assert stored.current not in candidates
    assert stored.current != canonical
    with override_settings(SECRET_KEY=NEW, SECRET_KEY_FALLBACKS=[]):
        assert keyed(canonical).current != stored.current


def test_item4_a_secret_rotation_keeps_matching_retries() -> None:
    canonical = request_fingerprint(charge())
    with override_settings(SECRET_KEY=OLD, SECRET_KEY_FALLBACKS=[]):
        stored = keyed(canonical).current
    with override_settings(SECRET_KEY=NEW, SECRET_KEY_FALLBACKS=[OLD]):
        rotated = keyed(canonical)
        assert rotated.matches(stored)
        assert rotated.current != stored  # new entries are written under the new key
        assert not rotated.matches(keyed(request_fingerprint(charge("{}"))).current)
    with override_settings(SECRET_KEY=NEW, SECRET_KEY_FALLBACKS=[]):
        assert not keyed(canonical).matches(stored)  # the old key is gone: so is its trust
        assert keyed(canonical).matches(rotated.current)


@given(st.text(max_size=80), st.text(max_size=80))
def test_keyed_matches_exactly_its_own_digest(a: str, b: str) -> None:
    assert keyed(a).matches(keyed(a).current)
    assert keyed(a).matches(keyed(b).current) == (a == b)
    assert not keyed(a).matches(a) or keyed(a).current == a


def test_keyed_accepts_any_stored_text_without_raising() -> None:
    mine = keyed("digest")
    assert isinstance(mine, Keyed)
    for stored in ["", "é" * 64, "\ud800", mine.current.upper(), mine.current + "0"]:
        assert not mine.matches(stored)


# --- snapshot and digest -------------------------------------------------------------------------


@given(st.dictionaries(st.text(max_size=5), st.integers(), max_size=5))
def test_item4_snapshot_then_digest_is_the_request_fingerprint(value: dict[str, int]) -> None:
    body = json.dumps(value)
    assert digest(snapshot(charge(body))) == request_fingerprint(charge(body))


def test_item4_snapshot_keeps_bytes_and_parses_nothing() -> None:
    request = form_post("b-1", {"amount": "5", "file": SimpleUploadedFile("a.txt", b"x" * 10)})
    taken = snapshot(request)
    assert isinstance(taken, RequestSnapshot)
    assert taken.body == request.body
    assert taken.form is None
    assert not hasattr(request, "_post")  # not parsed: that waits for digest()
    assert (taken.method, taken.path, taken.query) == ("POST", "/up/", b"")
    assert request.POST["amount"] == "5"  # and the view can still read it all


def test_item4_a_form_parsed_by_a_middleware_fingerprints_like_its_bytes() -> None:
    upload = SimpleUploadedFile("a.txt", b"hi")
    data = {"amount": "5", "order": ["approve", "pay"], "file": upload}
    consumed = form_post("first", data)
    consumed.POST  # noqa: B018  (as CsrfViewMiddleware does: the stream is read, no body kept)
    with pytest.raises(RawPostDataException):
        consumed.body  # noqa: B018
    upload.seek(0)
    assert request_fingerprint(consumed) == request_fingerprint(form_post("second", data))
    assert consumed.FILES.getlist("file")[0].read() == b"hi"  # hashing left it for the view


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=1000)
def test_a_multipart_post_too_large_to_hold_is_parsed_only_by_digest() -> None:
    def upload(boundary: str, content: bytes) -> HttpRequest:
        return form_post(boundary, {"amount": "1", "file": SimpleUploadedFile("a.bin", content)})

    request = upload("b-one", bytes(50_000))
    taken = snapshot(request)
    assert taken.body is None
    assert taken.form is not None
    assert not hasattr(request, "_post")
    assert digest(taken) == request_fingerprint(upload("b-two", bytes(50_000)))
    assert digest(taken) != request_fingerprint(upload("b-two", bytes(49_999) + b"\x01"))


def test_a_body_read_and_not_kept_is_an_error_not_a_collision() -> None:
    request = charge()
    request.read()
    with pytest.raises(RawPostDataException):
        request_fingerprint(request)


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=1000)
def test_a_large_multipart_read_between_snapshot_and_digest_is_an_error() -> None:
    request = form_post("b-1", {"file": SimpleUploadedFile("a.bin", bytes(5000))})
    taken = snapshot(request)
    assert taken.form is not None  # deferred to digest(): too large to hold now
    request.read()  # something reads the stream and keeps nothing: POST would be empty
    with pytest.raises(RawPostDataException, match="read before it was fingerprinted"):
        digest(taken)


def test_a_length_that_is_not_a_number_is_read_as_the_view_would_read_it() -> None:
    bad = {"CONTENT_LENGTH": "ten"}
    request = charge()
    request.META.update(bad)
    with pytest.raises(ValueError, match="ten"):  # as request.body raises for the view
        request_fingerprint(request)
    # A multipart POST is parsed instead, as Django parses it: an empty form.
    upload = form_post("b-1", {"amount": "5"})
    upload.META.update(bad)
    empty = form_post("b-2", {})
    assert request_fingerprint(upload) == request_fingerprint(empty)
    assert not upload.POST


def test_a_query_string_not_from_a_wsgi_server_is_its_utf8_bytes() -> None:
    def query(text: str) -> str:
        return request_fingerprint(factory.get("/c/", QUERY_STRING=text))

    # "€" is not latin-1: nobody decoded bytes as latin-1 to make it, so there is
    # nothing to undo; it counts as its UTF-8 bytes, as a WSGI server would pass them.
    assert query("q=€") == query("q=€".encode().decode("latin-1"))
    assert query("q=€") != query("q=$")


def test_more_query_fields_than_django_parses_compare_as_bytes() -> None:
    def query(text: str) -> str:
        return request_fingerprint(factory.get(f"/c/?{text}"))

    assert query("a=1&b=2&c=3") == query("c=3&b=2&a=1")  # fields by name
    with override_settings(DATA_UPLOAD_MAX_NUMBER_FIELDS=2):
        # Django answers 400 to more: the bytes are exact enough, and cheap.
        assert query("a=1&b=2&c=3") != query("c=3&b=2&a=1")
        assert query("a=1&b=2&c=3") == query("a=1&b=2&c=3")
        assert query("a=1&b=2") == query("b=2&a=1")


def test_an_unknown_charset_counts_lower_cased() -> None:
    def typed(content_type: str) -> str:
        return request_fingerprint(factory.generic("POST", "/c/", b"hi", content_type))

    assert typed("text/plain; charset=X-Nowhere") == typed("text/plain; charset=x-nowhere")
    assert typed("text/plain; charset=x-nowhere") != typed("text/plain; charset=x-elsewhere")
    assert typed("text/plain; charset=x-nowhere") != typed("text/plain")


def test_a_multipart_put_parsed_by_drf_is_fingerprinted_from_its_parse() -> None:
    data = {"amount": "1", "note": "longer than the limit below"}
    expected = request_fingerprint(form_post("b-3", data, "put"))
    request = form_post("b-1", data, "put")
    # What DRF's Request leaves on the Django request after parsing a form body.
    request._read_started = True  # type: ignore[attr-defined]
    request._post = factory.post("/", data).POST  # type: ignore[attr-defined]
    request._files = form_post("b-2", {}).FILES  # type: ignore[attr-defined]
    with override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=10):
        assert request_fingerprint(request) == expected


def test_a_multipart_body_django_cannot_parse_is_compared_as_bytes() -> None:
    def broken(body: bytes) -> str:
        request = factory.put("/up/", body, "multipart/form-data")  # no boundary
        return request_fingerprint(request)

    body = encode_multipart("zz", {"a": "1"})
    assert broken(body) == broken(body)
    assert broken(body) != broken(body.replace(b"zz", b"yy"))


# --- arguments -----------------------------------------------------------------------------------

ARGUMENTS = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=10,
)


def reversed_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {name: reversed_keys(value[name]) for name in reversed(list(value))}
    if isinstance(value, list):
        return tuple(reversed_keys(item) for item in value)
    return value


@given(ARGUMENTS)
def test_arguments_agree_in_any_key_order_and_tuples_are_lists(value: Any) -> None:
    assert arguments_digest(value) == arguments_digest(reversed_keys(value))
    assert len(arguments_digest(value)) == 64


@given(ARGUMENTS, ARGUMENTS)
def test_arguments_differ_when_their_json_differs(a: Any, b: Any) -> None:
    if json.dumps(a, sort_keys=True) != json.dumps(b, sort_keys=True):
        assert arguments_digest(a) != arguments_digest(b)


def test_arguments_are_exact_and_typed() -> None:
    moment = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    pairs = [
        (1, 1.0),
        (0.1, Decimal("0.1")),
        (Decimal("1.0"), Decimal("1.00")),
        (str(uuid.UUID(int=1)), uuid.UUID(int=1)),
        (moment.date(), str(moment.date())),
        (moment, moment.replace(tzinfo=None)),
        (date(2026, 1, 2), datetime(2026, 1, 2)),
        (True, 1),
        (0.0, -0.0),
        (float("nan"), "NaN"),
    ]
    for a, b in pairs:
        assert arguments_digest({"x": a}) != arguments_digest({"x": b}), (a, b)
    assert arguments_digest([0.5]) == arguments_digest(json.loads("[0.50]"))
    assert arguments_digest({"x": uuid.UUID(int=1)}) == arguments_digest({"x": uuid.UUID(int=1)})


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ({1, 2}, "set"),
        (b"raw", "bytes"),
        (object(), "object"),
        ({1: "a"}, "int"),
        ([{(1,): 2}], "tuple"),
    ],
)
def test_arguments_that_are_not_json_raise_type_error_naming_the_type(
    value: Any, named: str
) -> None:
    with pytest.raises(TypeError, match=named):
        arguments_digest(value)


def test_arguments_are_named_so_a_call_spelled_another_way_agrees() -> None:
    def charge_order(order_id: int, copies: int = 1) -> None: ...

    shape = signature_of(charge_order)
    named = bound_arguments(shape, (5,), {})
    assert named == {"order_id": 5, "copies": 1}
    assert bound_arguments(shape, (), {"order_id": 5}) == named
    assert bound_arguments(shape, (5, 1), {}) == named


def test_arguments_the_signature_refuses_are_kept_as_given() -> None:
    def charge_order(order_id: int) -> None: ...

    # The call itself then fails with its own TypeError; the digest must not.
    refused = bound_arguments(signature_of(charge_order), (5, 6), {"x": 1})
    assert refused == {"args": [5, 6], "kwargs": {"x": 1}}
    assert arguments_digest(refused) != arguments_digest({"order_id": 5})


def test_a_callable_without_a_signature_is_digested_by_its_arguments_as_given() -> None:
    assert signature_of(max) is None  # a builtin: inspect.signature raises ValueError
    assert bound_arguments(None, (1, 2), {"key": None}) == {
        "args": [1, 2],
        "kwargs": {"key": None},
    }
    assert arguments_digest(bound_arguments(None, (1, 2), {})) != arguments_digest(
        bound_arguments(None, (2, 1), {})
    )


def test_arguments_digest_is_not_a_request_fingerprint() -> None:
    assert arguments_digest({}) != hashlib.sha256(b"{}").hexdigest()


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=100)
def test_an_oversized_multipart_put_is_refused_not_taken_for_an_empty_form() -> None:
    request = form_post("b-1", {"file": SimpleUploadedFile("a.bin", bytes(1000))}, "put")
    assert not request.POST  # Django parses only POST bodies: empty, and nothing was read
    with pytest.raises(RequestDataTooBig):
        snapshot(request)
