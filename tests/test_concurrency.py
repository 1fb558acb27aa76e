"""The promise under real concurrency, on PostgreSQL and MySQL/MariaDB: real threads, row locks.

Each thread has its own database connection, as each worker of an app server does.
Every test runs under both protocols (``IDEMPOTENCY_PROTOCOL``): "lock" (the claim
inside the view's transaction, no row visible while in flight; PostgreSQL only)
and "lease".
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.db.models.functions import Now
from django.test import Client

from idempotency_django._storage.store.lease import take_over
from idempotency_django._storage.store.sql import Target
from idempotency_django.models import IdempotencyEntry
from tests import gates
from tests.helpers import charges, new_key, post, race
from tests.lock_helpers import query, wait_for, writer_of_charges

pytestmark = [
    pytest.mark.versions,
    pytest.mark.requires_server,
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture(
    params=[pytest.param("lock", marks=pytest.mark.requires_postgres), "lease"], autouse=True
)
def protocol(request: pytest.FixtureRequest, settings: Any) -> str:
    settings.IDEMPOTENCY_PROTOCOL = request.param
    return str(request.param)


STORM_TRIALS = 100
STORM_CONCURRENCY = 16


def _send(path: str, key: str, body: dict[str, Any] | None = None, tenant_user: Any = None) -> Any:
    client = Client(raise_request_exception=False)
    if tenant_user is not None:
        client.force_login(tenant_user)
    return post(client, path, key, body)


def _sender(path: str, key: str, body: dict[str, Any]) -> Callable[[int], Any]:
    return lambda _index: _send(path, key, body)


def _classify(responses: list[Any]) -> Counter[str]:
    """'original' for the one execution, 'replay' for byte-identical replays, '409' for busy."""
    originals = [r for r in responses if r.status_code == 201 and "Idempotent-Replayed" not in r]
    assert len(originals) == 1, [r.status_code for r in responses]
    kinds: Counter[str] = Counter()
    for response in responses:
        if response is originals[0]:
            kinds["original"] += 1
        elif response.status_code == 409:
            assert int(response["Retry-After"]) >= 1
            kinds["409"] += 1
        else:
            assert response["Idempotent-Replayed"] == "true"
            assert (response.status_code, response.content) == (201, originals[0].content)
            assert response["Location"] == originals[0]["Location"]
            kinds["replay"] += 1
    return kinds


def test_storm_of_same_key_requests_commits_exactly_one_execution(protocol: str) -> None:
    totals: Counter[str] = Counter()
    for trial in range(STORM_TRIALS):
        key = f"storm-{trial}-{new_key()}"
        # Half the trials make the first execution slow enough for duplicates to see it in flight.
        body = {"amount": 100, "sleep": 0.01 if trial % 2 else 0}
        responses = race(STORM_CONCURRENCY, _sender("/charges/", key, body))
        assert not [r for r in responses if isinstance(r, BaseException)], responses
        # A late retry replays whatever the storm's timing was (with a connection pool
        # every duplicate may land while the original is in flight).
        late = race(1, _sender("/charges/", key, body))
        totals += _classify([*responses, *late])
        assert late[0]["Idempotent-Replayed"] == "true"
        assert charges(key) == 1, f"trial {trial}: {charges(key)} executions committed"
    assert totals["original"] == STORM_TRIALS
    # The storm must have exercised in-flight duplicates (replays: the late retries).
    assert totals["409"] > 0
    print(
        f"\nstorm ({protocol}): {STORM_TRIALS} trials x {STORM_CONCURRENCY} threads: "
        f"{dict(totals)}, duplicates 0"
    )


def test_storm_of_failing_requests_never_commits_and_frees_the_key() -> None:
    for trial in range(10):
        key = f"fail-{trial}-{new_key()}"
        responses = race(8, _sender("/charges/", key, {"status": 503, "sleep": 0.005}))
        assert {r.status_code for r in responses} <= {503, 409}
        assert charges(key) == 0
        assert not IdempotencyEntry.objects.filter(key=key).exists()
        assert _send("/charges/", key).status_code == 201


def test_exceptions_under_concurrency_leave_no_business_row() -> None:
    key = new_key()
    responses = race(8, lambda _i: _send("/charges/", key, {"raise": True, "sleep": 0.005}))
    assert {r.status_code for r in responses} <= {500, 409}
    assert charges(key) == 0
    assert not IdempotencyEntry.objects.filter(key=key).exists()


def test_request_outliving_its_lease_is_never_executed_twice(protocol: str) -> None:
    """Lease 0.5 s, the view held at its gate past it: a duplicate and a takeover arrive after
    the lease.

    Under "lease" the claim is a committed row whose lease has passed while its
    transaction still holds the row lock; under "lock" no row is visible at all
    until the answer commits. Either way nobody may run the key a second time.
    """
    key = new_key()
    body = {"amount": 100, "hold": True}
    first: list[Any] = []
    with gates.armed(key) as gate:
        slow = threading.Thread(target=_in_thread, args=(first, "/charges/short-lease/", key, body))
        slow.start()
        gate.wait_arrival()
        _wait_lease_passed(key, protocol)
        entry = IdempotencyEntry.objects.filter(key=key).first()
        if protocol == "lease":
            assert entry is not None
            assert entry.status == IdempotencyEntry.Status.IN_PROGRESS
        else:
            assert entry is None, "the lock protocol's claim is visible before its commit"
        fingerprint = entry.fingerprint if entry is not None else ""
        duplicate = _send("/charges/short-lease/", key, body)
        takeover = take_over(
            Target("default", "", key, fingerprint, timedelta(seconds=0.5), timedelta(hours=1))
        )
        assert slow.is_alive()  # held at its gate: the duplicate met a running request
    slow.join(300)
    assert first[0].status_code == 201, (
        f"the request outliving its lease got {first[0].status_code}"
    )
    assert duplicate.status_code == 409
    assert takeover is None
    assert charges(key) == 1
    replay = _send("/charges/short-lease/", key, body)
    assert replay.content == first[0].content


def _wait_lease_passed(key: str, protocol: str, lease: float = 0.5) -> None:
    """Until the database's clock is past the held request's lease ("lease": its row's
    ``locked_until``; "lock", no row: its transaction's start plus the lease)."""
    if protocol == "lease":
        passed = IdempotencyEntry.objects.filter(key=key, locked_until__lt=Now())
        wait_for(passed.exists, 300, "the lease's end")
        return
    (started,) = query(
        "SELECT xact_start FROM pg_stat_activity WHERE pid = %s", (writer_of_charges(),)
    )[0]
    moment = started + timedelta(seconds=lease)
    wait_for(lambda: query("SELECT clock_timestamp() > %s", (moment,))[0][0], 300, "lease end")


def test_duplicate_with_other_payload_while_in_flight(protocol: str) -> None:
    """ "lease": 422 (the committed claim carries its fingerprint). "lock": 409, the
    in-flight claim isn't visible, only its advisory lock is; the retry after the
    commit then gets its 422."""
    key = new_key()
    first: list[Any] = []
    with gates.armed(key) as gate:
        slow = threading.Thread(target=_in_thread, args=(first, "/charges/", key, {"hold": True}))
        slow.start()
        gate.wait_arrival()
        other = _send("/charges/", key, {"amount": 5})
    slow.join(300)
    assert other.status_code == (422 if protocol == "lease" else 409)
    assert _send("/charges/", key, {"amount": 5}).status_code == 422
    assert first[0].status_code == 201
    assert charges(key) == 1


def test_atomic_requests_in_flight_duplicate_gets_409_not_a_wait(protocol: str) -> None:
    """The duplicate is answered while the first request is still held inside its
    transaction (ATOMIC_REQUESTS): it never waits for that transaction to end."""
    key = new_key()
    connection.settings_dict["ATOMIC_REQUESTS"] = True
    first: list[Any] = []
    duplicate: list[Any] = []
    try:
        with gates.armed(key) as gate:
            slow = threading.Thread(
                target=_in_thread, args=(first, "/charges/", key, {"hold": True})
            )
            slow.start()
            gate.wait_arrival()
            again = threading.Thread(
                target=_in_thread, args=(duplicate, "/charges/", key, {"hold": True})
            )
            again.start()
            again.join(300)  # bounds a broken run: the first can't end before the block does
            assert not again.is_alive(), "the duplicate waited for the first request's transaction"
            assert slow.is_alive()
        slow.join(300)
    finally:
        connection.settings_dict["ATOMIC_REQUESTS"] = False
    assert duplicate[0].status_code == 409
    assert first[0].status_code == 201
    assert charges(key) == 1


def test_two_tenants_racing_one_key_stay_apart(django_user_model: Any) -> None:
    alice = django_user_model.objects.create_user("alice")
    bob = django_user_model.objects.create_user("bob")
    key = new_key()
    users = [alice, bob] * 6
    responses = race(len(users), lambda i: _send("/charges/", key, {"amount": i % 2}, users[i]))
    for user in (alice, bob):
        mine = [r for i, r in enumerate(responses) if users[i] == user]
        kinds = _classify(mine)
        assert kinds["original"] == 1
        bodies = {json.loads(r.content)["tenant"] for r in mine if r.status_code == 201}
        assert bodies == {str(user.pk)}
    assert charges(key) == 2


def _in_thread(results: list[Any], path: str, key: str, body: dict[str, Any]) -> None:
    from django.db import connections

    try:
        results.append(_send(path, key, body))
    finally:
        connections.close_all()
