"""Stored answers: what ``StoredResponse`` keeps of a response and gives back on replay."""

from __future__ import annotations

import pytest
from django.http import HttpResponse
from hypothesis import given
from hypothesis import strategies as st

from idempotency_django._protocol.responses import StoredResponse

REASONS = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1, max_size=40)


def test_item9_a_custom_reason_phrase_is_replayed() -> None:
    declined = HttpResponse(b'{"error": "declined"}', status=402, reason="Card Declined")
    stored = StoredResponse.from_response(declined)
    replayed = stored.to_response()
    assert replayed.reason_phrase == "Card Declined"
    assert stored.reason == "Card Declined"
    assert (replayed.status_code, replayed.content) == (402, declined.content)


@pytest.mark.parametrize("status", [200, 201, 402, 418, 299])
def test_the_standard_reason_phrase_is_stored_as_empty(status: int) -> None:
    response = HttpResponse(status=status)
    stored = StoredResponse.from_response(response)
    assert stored.reason == ""
    assert stored.to_response().reason_phrase == response.reason_phrase
    explicit = HttpResponse(status=status, reason=response.reason_phrase)
    assert StoredResponse.from_response(explicit).reason == ""


@given(st.sampled_from([200, 201, 400, 402, 404, 422, 299]), REASONS)
def test_reason_phrases_round_trip(status: int, reason: str) -> None:
    replayed = StoredResponse.from_response(HttpResponse(status=status, reason=reason))
    assert replayed.to_response().reason_phrase == reason


def test_stored_responses_built_without_a_reason_keep_the_standard_phrase() -> None:
    # Rows and cache entries written before the reason was stored.
    assert StoredResponse(402, [], b"").to_response().reason_phrase == "Payment Required"
