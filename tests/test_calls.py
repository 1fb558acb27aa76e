"""The function API: ``idempotent_call`` and ``idempotent_function`` on the views' table."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any
from unittest.mock import ANY

import pytest
from django.db import transaction

from idempotency_django import idempotent_call, idempotent_function
from idempotency_django.calls import namespaced
from idempotency_django.exceptions import KeyReused, RequestInProgress
from idempotency_django.models import IdempotencyEntry
from tests.helpers import race
from tests.testapp.models import Charge

pytestmark = pytest.mark.django_db(transaction=True)


def charge(key: str, amount: int = 100, **options: Any) -> tuple[bool, Any]:
    with idempotent_call(key, scope="test", arguments={"amount": amount}, **options) as call:
        if call.replayed:
            return True, call.result
        made = Charge.objects.create(reference=key, amount=amount)
        call.result = {"id": made.pk, "amount": amount}
    return False, call.result


def test_a_finished_duplicate_returns_the_stored_result_without_running() -> None:
    first = charge("evt_1")
    again = charge("evt_1")
    assert first == (False, {"id": first[1]["id"], "amount": 100})
    assert again == (True, first[1])
    assert Charge.objects.filter(reference="evt_1").count() == 1


def test_other_arguments_under_one_key_are_refused() -> None:
    charge("evt_2", 100)
    with pytest.raises(KeyReused):
        charge("evt_2", 200)


def test_an_exception_rolls_back_and_frees_the_key() -> None:
    with pytest.raises(RuntimeError), idempotent_call("evt_3", scope="test") as call:
        assert not call.replayed
        Charge.objects.create(reference="evt_3", amount=1)
        raise RuntimeError("failed after its write")
    assert not Charge.objects.filter(reference="evt_3").exists()
    assert charge("evt_3")[0] is False
    assert Charge.objects.filter(reference="evt_3").count() == 1


def test_keys_are_namespaced_apart_from_view_keys_and_each_other() -> None:
    charge("same")
    with idempotent_call("same", scope="other") as call:
        assert not call.replayed
        call.result = 1
    stored = set(IdempotencyEntry.objects.values_list("key", flat=True))
    assert stored == {"test\x1fsame", "other\x1fsame"}
    with pytest.raises(ValueError):
        namespaced("bad\x1fscope", "k")
    with pytest.raises(ValueError):
        namespaced("s", "x" * 300)


def test_results_round_trip_uuid_decimal_and_datetimes() -> None:
    value = {
        "id": uuid.uuid4(),
        "amount": Decimal("10.30"),
        "at": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        "day": date(2026, 1, 2),
        "items": [1, "two"],
    }
    for _ in range(2):
        with idempotent_call("evt_rt", scope="test") as call:
            if not call.replayed:
                call.result = value
    assert call.replayed
    assert call.result == value


def test_a_result_json_cannot_hold_rolls_back() -> None:
    with pytest.raises(TypeError), idempotent_call("evt_bad", scope="test") as call:
        Charge.objects.create(reference="evt_bad", amount=1)
        call.result = object()
    assert not Charge.objects.filter(reference="evt_bad").exists()
    assert not IdempotencyEntry.objects.exists()


def test_the_decorator_runs_once_per_business_key() -> None:
    runs: list[int] = []

    @idempotent_function(key=lambda order_id, **_: f"order-{order_id}", scope="receipts")
    def receipt(order_id: int, copies: int = 1) -> dict[str, int]:
        runs.append(order_id)
        return {"order": order_id, "copies": copies}

    assert receipt(7) == {"order": 7, "copies": 1}
    assert receipt(7) == {"order": 7, "copies": 1}
    assert runs == [7]
    with pytest.raises(KeyReused):
        receipt(7, copies=2)


def test_positional_keyword_and_default_arguments_fingerprint_alike() -> None:
    runs: list[int] = []

    @idempotent_function(key=lambda order_id, copies=1: f"order-{order_id}", scope="shapes")
    def receipt(order_id: int, copies: int = 1) -> int:
        runs.append(order_id)
        return order_id

    # A redelivery may spell the same call another way: it replays, never KeyReused.
    assert receipt(5) == receipt(order_id=5) == receipt(5, copies=1) == receipt(5, 1) == 5
    assert runs == [5]
    with pytest.raises(KeyReused):
        receipt(order_id=5, copies=2)


def test_derived_keys_are_stable_and_scoped() -> None:
    with idempotent_call("k", scope="a") as first:
        first.result = first.derive("provider")
    with idempotent_call("k", scope="a") as again:
        pass
    with idempotent_call("k", scope="b") as other:
        other.result = other.derive("provider")
    assert again.result == first.result != other.result


def test_inside_a_callers_transaction_the_call_joins_it() -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        charge("evt_outer")
        raise RuntimeError("the caller's transaction fails")
    assert not IdempotencyEntry.objects.exists()
    assert charge("evt_outer")[0] is False


def test_concurrent_duplicates_run_once() -> None:
    results = race(8, lambda _: _safe_charge("evt_race"))
    assert Charge.objects.filter(reference="evt_race").count() == 1
    assert sum(1 for r in results if r == "ran") == 1
    assert all(r in ("ran", "replayed", "busy") for r in results)


def _safe_charge(key: str) -> str:
    try:
        replayed, _ = charge(key)
    except RequestInProgress:
        return "busy"
    return "replayed" if replayed else "ran"


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"wait": 30 * 86400}, "wait"),  # PostgreSQL's lock_timeout is int milliseconds
        ({"wait": float("inf")}, "wait"),
        ({"ttl": float("nan")}, "ttl"),
        ({"protocol": "nope"}, "protocol"),
    ],
)
def test_wrong_values_are_refused_before_claiming(options: dict[str, Any], named: str) -> None:
    with pytest.raises(ValueError, match=rf"idempotent_call\({named}=\.\.\.\)"):
        charge("evt_bad", **options)
    with pytest.raises(ValueError, match=rf"@idempotent_function\({named}=\.\.\.\)"):
        idempotent_function(key=lambda: "k", **options)
    assert not IdempotencyEntry.objects.exists()


def test_wait_takes_a_timedelta() -> None:
    assert charge("evt_td", wait=timedelta(seconds=1)) == (False, {"id": ANY, "amount": 100})
