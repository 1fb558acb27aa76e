"""The fingerprint: canonical JSON, and sensitive to everything else that matters."""

from __future__ import annotations

import json
import tracemalloc
from decimal import Decimal
from typing import Any

import pytest
from django.test import AsyncRequestFactory, RequestFactory, override_settings
from hypothesis import given
from hypothesis import strategies as st

from idempotency_django._protocol.fingerprint import request_fingerprint

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.text(max_size=10)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=12,
)
factory = RequestFactory()


def fingerprint(
    body: bytes | str,
    method: str = "post",
    path: str = "/charges/",
    content_type: str = "application/json",
) -> str:
    request = getattr(factory, method)(path, body, content_type=content_type)
    return request_fingerprint(request)


def shuffled_dump(value: Any, indent: int | None, reverse: bool) -> str:
    if isinstance(value, dict):
        items = sorted(value.items(), reverse=reverse)
        return json.dumps(dict(items), indent=indent, sort_keys=False)
    return json.dumps(value, indent=indent)


@given(st.dictionaries(st.text(max_size=6), JSON, max_size=6), st.sampled_from([None, 0, 2]))
def test_same_json_in_any_key_order_or_spacing_agrees(
    value: dict[str, Any], indent: int | None
) -> None:
    compact = json.dumps(value, separators=(",", ":"))
    assert fingerprint(compact) == fingerprint(shuffled_dump(value, indent, reverse=True))
    assert fingerprint(compact) == fingerprint(shuffled_dump(value, indent, reverse=False))


@given(JSON, JSON)
def test_any_changed_value_changes_the_fingerprint(a: Any, b: Any) -> None:
    if json.dumps(a, sort_keys=True) != json.dumps(b, sort_keys=True):
        assert fingerprint(json.dumps({"x": a})) != fingerprint(json.dumps({"x": b}))


@given(st.text(st.characters(min_codepoint=0x61, max_codepoint=0x7A), min_size=1, max_size=10))
def test_path_query_and_method_matter(segment: str) -> None:
    body = json.dumps({"amount": 1})
    base = fingerprint(body)
    assert fingerprint(body, path=f"/charges/{segment}/") != base
    assert fingerprint(body, path=f"/charges/?{segment}=1") != base
    assert fingerprint(body, method="put") != base
    assert fingerprint(body, method="patch") != base


def test_query_parameter_order_does_not_matter() -> None:
    assert fingerprint("{}", path="/c/?a=1&b=2") == fingerprint("{}", path="/c/?b=2&a=1")
    assert fingerprint("{}", path="/c/?a=1") != fingerprint("{}", path="/c/?a=2")
    # getlist() order is data: a repeated parameter's values keep theirs.
    assert fingerprint("{}", path="/c/?a=1&a=2") != fingerprint("{}", path="/c/?a=2&a=1")


@given(st.binary(max_size=200), st.binary(max_size=200))
def test_raw_bodies_are_compared_byte_for_byte(a: bytes, b: bytes) -> None:
    same = fingerprint(a, content_type="application/octet-stream") == fingerprint(
        b, content_type="application/octet-stream"
    )
    assert same == (a == b)


def test_invalid_json_is_compared_as_bytes_and_never_fails() -> None:
    assert fingerprint(b"{not json") == fingerprint(b"{not json")
    assert fingerprint(b"{not json") != fingerprint(b"{not  json")
    assert fingerprint(b"\xff\xfe") != fingerprint(b"\xfe\xff")


def test_fingerprint_is_a_hash_not_the_body() -> None:
    value = fingerprint(json.dumps({"card": "4242424242424242"}))
    assert len(value) == 64
    assert "4242" not in value


# --- issue 9, item 4: fingerprints that neither collide nor reveal --------------------------------

FIELD_TEXT = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E, exclude_characters='"'))
FIELDS = st.lists(st.tuples(st.sampled_from(["a", "b", "order"]), FIELD_TEXT), max_size=6)
BOUNDARIES = st.text("abcdefghijklmnopqrstuvwxyz0123456789'()+_,-.", min_size=8, max_size=40)
BODY_METHODS = ["post", "put", "patch", "delete"]


def multipart(boundary: str, fields: list[tuple[str, str]], files: Any = ()) -> bytes:
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
        for name, value in fields
    ]
    parts += [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
        f"Content-Type: {content_type}\r\n\r\n".encode()
        + content
        + b"\r\n"
        for name, filename, content_type, content in files
    ]
    return b"".join(parts) + f"--{boundary}--\r\n".encode()


def multipart_fingerprint(
    boundary: str, fields: list[tuple[str, str]], method: str = "post", files: Any = ()
) -> str:
    content_type = f"multipart/form-data; boundary={boundary}"
    return fingerprint(multipart(boundary, fields, files), method, "/charges/", content_type)


def by_name(fields: list[tuple[str, str]]) -> list[tuple[str, list[str]]]:
    names = sorted({name for name, _ in fields})
    return [(name, [value for other, value in fields if other == name]) for name in names]


@pytest.mark.parametrize("method", BODY_METHODS)
def test_item4_multipart_repeated_fields_keep_their_order(method: str) -> None:
    boundary = "b0undary"
    ordered = [("order", "approve"), ("order", "pay"), ("order", "ship")]
    assert multipart_fingerprint(boundary, ordered, method) != multipart_fingerprint(
        boundary, ordered[::-1], method
    )


@pytest.mark.parametrize("method", BODY_METHODS)
@given(fields=FIELDS, first=BOUNDARIES, second=BOUNDARIES)
def test_item4_multipart_with_a_new_boundary_is_the_same_request(
    method: str, fields: list[tuple[str, str]], first: str, second: str
) -> None:
    upload = [("file", "scan.pdf", "application/pdf", b"%PDF-1.7 \x00\xff")]
    assert multipart_fingerprint(first, fields, method, upload) == multipart_fingerprint(
        second, fields, method, upload
    )


@given(FIELDS, FIELDS)
def test_item4_multipart_differs_exactly_when_a_name_s_values_differ(
    a: list[tuple[str, str]], b: list[tuple[str, str]]
) -> None:
    same = multipart_fingerprint("one-boundary", a, "put") == multipart_fingerprint(
        "another-boundary", b, "put"
    )
    assert same == (by_name(a) == by_name(b))


def test_item4_multipart_file_content_name_and_type_count() -> None:
    base = [("file", "a.txt", "text/plain", b"hello")]
    variants = [
        [("file", "a.txt", "text/plain", b"hellO")],
        [("file", "b.txt", "text/plain", b"hello")],
        [("file", "a.txt", "application/octet-stream", b"hello")],
        [("other", "a.txt", "text/plain", b"hello")],
    ]
    first = multipart_fingerprint("x-boundary", [], "patch", base)
    assert multipart_fingerprint("y-boundary", [], "patch", base) == first
    for files in variants:
        assert multipart_fingerprint("x-boundary", [], "patch", files) != first


@pytest.mark.parametrize("method", BODY_METHODS)
def test_item4_form_bodies_are_canonical_for_every_method(method: str) -> None:
    def form(body: str) -> str:
        return fingerprint(body, method, "/charges/", "application/x-www-form-urlencoded")

    assert form("amount=100&note=x") == form("note=x&amount=100")
    assert form("note=a+b&amount=%31%30%30") == form("amount=100&note=a%20b")
    assert form("order=approve&order=pay&order=ship") != form("order=ship&order=pay&order=approve")
    assert form("amount=100") != form("amount=101")


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("0.30000000000000001", "0.3"),
        ("1e400", "5e999"),
        ("-1e400", "-5e999"),
        ("123456789012345678901234567890", "123456789012345678901234567891"),
        ("1.0", "1"),
        ("0.0", "-0.0"),
        ("1E-400", "2E-400"),
    ],
)
def test_item4_json_numbers_are_compared_exactly(a: str, b: str) -> None:
    assert fingerprint(f'{{"amount": {a}}}') != fingerprint(f'{{"amount": {b}}}')


@pytest.mark.parametrize(
    ("a", "b"),
    [("1.0", "1.00"), ("100.0", "1e2"), ("0.001e3", "1E0"), ("-0", "0"), ("12.50", "1.25e1")],
)
def test_json_numbers_of_one_kind_and_value_agree(a: str, b: str) -> None:
    assert fingerprint(f'{{"amount": {a}}}') == fingerprint(f'{{"amount": {b}}}')


def exact_texts(value: Decimal) -> tuple[str, str]:
    fixed = format(value, "f")
    return (fixed if "." in fixed else fixed + ".0"), format(value, "e")


DECIMALS = st.decimals(allow_nan=False, allow_infinity=False)


@given(DECIMALS, DECIMALS)
def test_json_fraction_numbers_agree_exactly_when_their_values_do(a: Decimal, b: Decimal) -> None:
    a_fixed, a_scientific = exact_texts(a)
    b_fixed, _ = exact_texts(b)
    assert fingerprint(f"[{a_fixed}]") == fingerprint(f"[{a_scientific}]")
    same_value = a == b and a.is_signed() == b.is_signed()
    assert (fingerprint(f"[{a_fixed}]") == fingerprint(f"[{b_fixed}]")) == same_value


def test_item4_content_type_is_part_of_the_fingerprint() -> None:
    form = fingerprint("amount=100", content_type="application/x-www-form-urlencoded")
    assert fingerprint("amount=100", content_type="text/plain") != form
    assert fingerprint("{}", content_type="application/json") != fingerprint(
        "{}", content_type="application/merge-patch+json"
    )
    assert fingerprint("x", content_type="text/plain; charset=latin-1") != fingerprint(
        "x", content_type="text/plain; charset=utf-8"
    )


def test_content_type_spelling_and_the_boundary_do_not_count() -> None:
    json_body = '{"amount": 1}'
    assert fingerprint(json_body, content_type="Application/JSON; Charset=UTF8") == fingerprint(
        json_body, content_type="application/json; charset=utf-8"
    )
    assert fingerprint(
        multipart("one", [("a", "1")]), content_type="multipart/form-data; boundary=one"
    ) == fingerprint(
        multipart("two", [("a", "1")]), content_type="multipart/form-data;  BOUNDARY=two"
    )


def test_item4_raw_query_bytes_are_decoded_as_utf8_not_latin1() -> None:
    # RequestFactory passes a raw "é" as a WSGI server does: its UTF-8 bytes, as latin-1 text.
    assert fingerprint("{}", path="/c/?x=é") != fingerprint("{}", path="/c/?x=%C3%83%C2%A9")
    assert fingerprint("{}", path="/c/?x=é") == fingerprint("{}", path="/c/?x=%C3%A9")
    assert fingerprint("{}", path="/c/?x=a+b") == fingerprint("{}", path="/c/?x=a%20b")


def test_asgi_query_strings_are_their_utf8_bytes() -> None:
    asgi = AsyncRequestFactory()
    raw = asgi.post("/c/?x=é", "{}", content_type="application/json")
    escaped = asgi.post("/c/?x=%C3%A9", "{}", content_type="application/json")
    mojibake = asgi.post("/c/?x=%C3%83%C2%A9", "{}", content_type="application/json")
    assert request_fingerprint(raw) == request_fingerprint(escaped) != request_fingerprint(mojibake)
    assert request_fingerprint(raw) == fingerprint("{}", path="/c/?x=é")


JSON_SHAPES = {
    "orders": lambda n: {
        "orders": [
            {"id": i, "sku": f"SKU-{i:06d}", "quantity": i % 7, "price": 12.5 + i, "tags": ["gift"]}
            for i in range(n)
        ]
    },
    "small objects": lambda n: [{"a": i} for i in range(n)],
    "floats": lambda n: [i + 0.25 for i in range(n)],
    "strings": lambda n: [f"s{i}" for i in range(n)],
    "one string": lambda n: {"blob": "y" * (n * 10)},
}


def json_body_of(shape: str, size: int) -> bytes:
    count, body = 1000, b""
    for _ in range(3):  # longer numbers in longer lists: converge on the size
        body = json.dumps(JSON_SHAPES[shape](count)).encode()
        count = count * size // len(body)
    return body


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=None)
@pytest.mark.parametrize("shape", list(JSON_SHAPES))
def test_item4_fingerprint_memory_is_a_small_multiple_of_a_large_json_body(shape: str) -> None:
    # A megabyte: large beside the fingerprint's fixed costs (the ratio is the claim),
    # and a quarter of the traced time of 0.4's 2.6 MB.
    body = json_body_of(shape, 1_000_000)
    request = factory.post("/charges/", body, content_type="application/json")
    request.body  # noqa: B018  (already held, as when the snapshot is taken)
    tracemalloc.start()
    try:
        request_fingerprint(request)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak / len(body) <= 8, f"{shape}: {peak / len(body):.1f}x of {len(body)} bytes"
