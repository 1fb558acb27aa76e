"""Key parsing and ``derive``: hypothesis over everything a header can carry."""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest
from django.test import override_settings
from hypothesis import given
from hypothesis import strategies as st

from idempotency_django._protocol.keys import parse_key
from idempotency_django._storage.secret import derive_key
from idempotency_django.exceptions import KeyMalformed
from idempotency_django.models import IdempotencySecret

VISIBLE = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=255)
SF_CHARS = st.characters(min_codepoint=0x20, max_codepoint=0x7E)


def sf_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


@given(VISIBLE.filter(lambda k: not k.startswith('"')))
def test_visible_ascii_tokens_are_their_own_key(key: str) -> None:
    assert parse_key(key, 255) == key


@given(st.text(SF_CHARS, min_size=1, max_size=200))
def test_quoted_sf_string_means_its_content(key: str) -> None:
    assert parse_key(sf_quote(key), 255) == key


@given(VISIBLE.filter(lambda k: not k.startswith('"')), st.sampled_from(["", " ", "\t", "  "]))
def test_surrounding_whitespace_is_ignored(key: str, pad: str) -> None:
    assert parse_key(pad + key + pad, 255) == key


@given(st.text(min_size=0, max_size=300))
def test_any_text_parses_or_raises_malformed(raw: str) -> None:
    try:
        key = parse_key(raw, 255)
    except KeyMalformed:
        return
    assert 1 <= len(key) <= 255
    assert all(0x20 <= ord(ch) <= 0x7E for ch in key)


@given(st.binary(max_size=300))
def test_any_bytes_parse_or_raise_malformed(raw: bytes) -> None:
    try:
        key = parse_key(raw, 255)
    except KeyMalformed:
        return
    assert key.isascii()


@given(st.integers(min_value=1, max_value=255), st.data())
def test_length_limit(limit: int, data: st.DataObject) -> None:
    key = data.draw(st.text("abc", min_size=limit + 1, max_size=limit + 5))
    with pytest.raises(KeyMalformed):
        parse_key(key, limit)
    assert parse_key(key[:limit], limit) == key[:limit]


@pytest.mark.parametrize("raw", ["", '""', " ", "a\x7fb", "a\x00", "é", '"a', '"a"b', '"\\n"'])
def test_malformed_examples(raw: str) -> None:
    with pytest.raises(KeyMalformed):
        parse_key(raw, 255)


@pytest.mark.django_db
@given(st.text(max_size=20), st.text(min_size=1, max_size=40), st.text(max_size=20))
def test_derive_is_stable_and_never_the_key(tenant: str, key: str, namespace: str) -> None:
    derived = derive_key(tenant, key, namespace)
    assert derived == derive_key(tenant, key, namespace)
    assert derived != key
    assert len(derived) == 64


@pytest.mark.django_db
@given(
    st.tuples(st.text(max_size=8), st.text(min_size=1, max_size=8), st.text(max_size=8)),
    st.tuples(st.text(max_size=8), st.text(min_size=1, max_size=8), st.text(max_size=8)),
)
def test_derive_differs_when_anything_differs(
    a: tuple[str, str, str], b: tuple[str, str, str]
) -> None:
    if a != b:
        assert derive_key(*a) != derive_key(*b)


@pytest.mark.django_db
def test_derive_depends_on_the_idempotency_secret() -> None:
    first = derive_key("t", "k", "payments")
    with override_settings(IDEMPOTENCY_SECRET="another-secret-of-at-least-32-chars"):
        assert derive_key("t", "k", "payments") != first


def _derived_by_0_2(secret_key: str, tenant: str, key: str, ns: str) -> str:
    message = json.dumps([tenant, key, ns], ensure_ascii=False).encode("utf-8", "surrogatepass")
    secret = hashlib.sha256(b"idempotency_django.derive" + secret_key.encode()).digest()
    return hmac.new(secret, message, "sha256").hexdigest()


@pytest.mark.django_db(transaction=True)  # the secret row is read apart from a transaction
def test_item3_dropping_the_oldest_fallback_keeps_derived_keys() -> None:
    """A request that reached the provider and failed derives the same key on its retry,
    whatever happens to SECRET_KEY between the two (0.2.0 changed it on the drop)."""
    IdempotencySecret.objects.all().delete()  # as on a database upgraded from 0.2.0
    with override_settings(SECRET_KEY="new-secret", SECRET_KEY_FALLBACKS=["old-secret"]):
        first_try = derive_key("t", "k", "payments")
    with override_settings(SECRET_KEY="new-secret", SECRET_KEY_FALLBACKS=[]):
        assert derive_key("t", "k", "payments") == first_try
    with override_settings(SECRET_KEY="newest-secret", SECRET_KEY_FALLBACKS=[]):
        assert derive_key("t", "k", "payments") == first_try


@pytest.mark.django_db(transaction=True)
def test_item3_an_upgrade_from_0_2_keeps_every_derived_key() -> None:
    IdempotencySecret.objects.all().delete()
    with override_settings(SECRET_KEY="new-secret", SECRET_KEY_FALLBACKS=["mid", "old-secret"]):
        assert derive_key("t", "k", "p") == _derived_by_0_2("old-secret", "t", "k", "p")
    IdempotencySecret.objects.all().delete()  # a flushed test database: the same value again
    with override_settings(SECRET_KEY="new-secret", SECRET_KEY_FALLBACKS=["mid", "old-secret"]):
        assert derive_key("t", "k", "p") == _derived_by_0_2("old-secret", "t", "k", "p")


@pytest.mark.django_db(transaction=True)
@given(st.text(max_size=20), st.text(min_size=1, max_size=40), st.text(max_size=20))
def test_derive_without_fallbacks_is_what_0_1_derived(tenant: str, key: str, ns: str) -> None:
    # Upgrading must not hand a provider new keys for work it has already seen.
    IdempotencySecret.objects.all().delete()
    with override_settings(SECRET_KEY="a-secret", SECRET_KEY_FALLBACKS=[]):
        assert derive_key(tenant, key, ns) == _derived_by_0_2("a-secret", tenant, key, ns)


def test_idempotency_secret_set_needs_no_database() -> None:
    # Same derivation as a persisted value seeded from that string: setting
    # IDEMPOTENCY_SECRET to the old SECRET_KEY keeps the keys.
    with override_settings(IDEMPOTENCY_SECRET="a-secret"):
        assert derive_key("t", "k", "p") == _derived_by_0_2("a-secret", "t", "k", "p")
