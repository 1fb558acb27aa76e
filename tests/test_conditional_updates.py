"""Conditional updates: ``If-Match`` checked in the claim's transaction (412, 428), and
``apply_once`` for operations that carry no key."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
from django.db.models import F
from django.test import Client, RequestFactory

from idempotency_django.conditional import (
    apply_once,
    etag,
    if_match_list,
    precondition_error,
    version_of,
)
from tests.conftest import close_connections_after
from tests.testapp.models import Charge

pytestmark = pytest.mark.urls("tests.testapp.conditional_views")


def patch(pk: int, if_match: str | None, key: str | None = None, **body: Any) -> Any:
    headers = {"Idempotency-Key": key or str(uuid.uuid4())}
    if if_match is not None:
        headers["If-Match"] = if_match
    return Client().patch(
        f"/conditional/charges/{pk}/", body, content_type="application/json", headers=headers
    )


@pytest.mark.django_db
def test_a_matching_if_match_applies_and_a_stale_one_is_refused_with_412() -> None:
    charge = Charge.objects.create(reference="a", amount=7)
    applied = patch(charge.pk, '"7"', reference="b")
    assert (applied.status_code, applied["ETag"], applied.json()["version"]) == (200, '"8"', 8)

    stale = patch(charge.pk, '"7"', reference="c")
    assert (stale.status_code, stale["Content-Type"]) == (412, "application/problem+json")
    assert stale.json()["type"].endswith("#precondition-failed")
    assert Charge.objects.get(pk=charge.pk).reference == "b"


@pytest.mark.django_db
def test_no_if_match_is_428_where_required_and_allowed_where_not() -> None:
    charge = Charge.objects.create(reference="a", amount=1)
    refused = patch(charge.pk, None)
    assert (refused.status_code, refused.json()["status"]) == (428, 428)
    put = Client().put(f"/conditional/put/{charge.pk}/", headers={"Idempotency-Key": "p-1"})
    assert (put.status_code, put["ETag"]) == (204, '"2"')
    stale = Client().put(
        f"/conditional/put/{charge.pk}/", headers={"Idempotency-Key": "p-2", "If-Match": '"1"'}
    )
    assert stale.status_code == 412


@pytest.mark.django_db
def test_a_retry_with_the_same_key_replays_rather_than_412() -> None:
    """Key and precondition together: the lost answer of an update that applied comes back."""
    charge = Charge.objects.create(reference="a", amount=3)
    first = patch(charge.pk, '"3"', key="k-1", reference="b")
    again = patch(charge.pk, '"3"', key="k-1", reference="b")
    assert (first.status_code, again.status_code) == (200, 200)
    assert again["Idempotent-Replayed"] == "true"
    assert again.content == first.content
    assert Charge.objects.get(pk=charge.pk).amount == 4


@pytest.mark.django_db
def test_weak_star_missing_and_malformed_if_match() -> None:
    charge = Charge.objects.create(reference="a", amount=5)
    assert patch(charge.pk, 'W/"5"').status_code == 412
    assert patch(charge.pk, '"4", "5"').status_code == 200
    assert patch(charge.pk, "*").status_code == 200
    assert patch(charge.pk, "6").status_code == 412  # not a quoted entity tag
    assert patch(charge.pk + 1000, "*").status_code == 412  # no such resource


def test_if_match_parsing_and_etags() -> None:
    assert if_match_list('"a", W/"b" ,"c"') == [(False, '"a"'), (True, '"b"'), (False, '"c"')]
    assert if_match_list(" * ") == []
    assert if_match_list('"a" "b"') is None
    assert if_match_list("") is None
    assert etag(12) == '"12"'
    assert etag("two words") == etag("two words") != etag("two  words")
    assert len(etag("ü")) == 34
    request = RequestFactory().patch("/", headers={"If-Match": '"1"'})
    assert precondition_error(request, '"1"') is None
    assert precondition_error(RequestFactory().patch("/"), '"1"', required=False) is None


@pytest.mark.django_db
def test_a_version_field_read_by_version_of() -> None:
    charge = Charge.objects.create(reference="a", amount=9)

    def delete(if_match: str, key: str) -> int:
        headers = {"Idempotency-Key": key, "If-Match": if_match}
        return Client().delete(f"/conditional/delete/{charge.pk}/", headers=headers).status_code

    assert delete('"8"', "d-1") == 412
    assert delete('"9"', "d-2") == 204
    assert delete('"9"', "d-2") == 204  # the replay
    assert delete('"9"', "d-3") == 412  # gone
    assert not Charge.objects.filter(pk=charge.pk).exists()
    assert version_of(Charge, "amount")(None, pk=charge.pk) is None  # a model: its manager


@pytest.mark.django_db
def test_apply_once_applies_an_operation_id_once() -> None:
    charge = Charge.objects.create(reference="", amount=100)
    assert apply_once(charge, "op-1", field="reference", amount=F("amount") - 30)
    assert not apply_once(charge, "op-1", field="reference", amount=F("amount") - 30)
    assert apply_once(Charge.objects.filter(pk=charge.pk), "op-2", field="reference", amount=0)
    charge.refresh_from_db()
    assert (charge.reference, charge.amount) == ("op-2", 0)


@pytest.mark.requires_postgres
@pytest.mark.django_db(transaction=True)
def test_a_patch_race_with_one_if_match_applies_once() -> None:
    """16 threads, the same If-Match, different keys: one applies, the others get 412."""
    charge = Charge.objects.create(reference="start", amount=1)
    start = threading.Barrier(16)
    answers: list[int] = []

    @close_connections_after
    def racer(n: int) -> None:
        start.wait()
        answers.append(patch(charge.pk, '"1"', reference=f"racer-{n}").status_code)

    threads = [threading.Thread(target=racer, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert sorted(answers) == [200] + [412] * 15
    assert Charge.objects.get(pk=charge.pk).amount == 2
