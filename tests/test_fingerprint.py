"""The fingerprint: canonical JSON, and sensitive to everything else that matters."""

from __future__ import annotations

import json
from typing import Any

from django.test import RequestFactory
from hypothesis import given
from hypothesis import strategies as st

from idempotency_django.fingerprint import request_fingerprint

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
