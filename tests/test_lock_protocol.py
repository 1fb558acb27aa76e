"""The lock protocol (issue 10) on real PostgreSQL connections: threads, processes, SIGKILL.

Every request goes to one view (``tests.testapp.lock_views``) whose protocol,
``wait`` and lease come from headers, so requests under different protocols
share a key and a fingerprint. The holder of a key is a request in a thread of
its own (its own connection) whose view sleeps (idle) or works (busy) inside
its transaction; the duplicates come from the test's thread. Time bounds below
are generous assertion margins, not benchmarks: each is far below what the
broken behaviour would take (queueing behind a holder that sleeps seconds).
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from django.db import connection, connections, transaction

from idempotency_django.models import IdempotencyEntry
from tests.helpers import charges, new_key, problem, race
from tests.lock_helpers import (
    Background,
    LockWatch,
    Worker,
    advisory_holder,
    backend_alive,
    dsn,
    query,
    send,
    timed_send,
    wait_for,
    writer_of_charges,
)
from tests.testapp.models import Charge

pytestmark = [
    pytest.mark.versions,
    pytest.mark.requires_postgres,
    pytest.mark.django_db(transaction=True),
]

AT_ONCE = 0.5  # s: the bound on "at once"; the holders below keep their key 2 s or more
BOTH = pytest.mark.parametrize("protocol", ["lock", "lease"])


def _target(key: str) -> Any:
    from datetime import timedelta

    from idempotency_django._storage.store.sql import Target

    return Target("default", "", key, "", timedelta(0), timedelta(0))


def _start(key: str, body: dict[str, Any], protocol: str = "lock", **options: Any) -> Background:
    """A holder of ``key`` in its own thread, returned once its view has written its charge.

    Seen from outside through ``pg_locks`` (a transaction that wrote to the charges
    table), whatever the protocol: the test doesn't trust the mechanism it tests.
    """
    holder = Background(key, body, {"protocol": protocol, **options})
    wait_for(lambda: writer_of_charges() or not holder.alive, what=f"view of {key}")
    assert holder.alive, "the holder finished before it was seen holding its key"
    return holder


def _busy(response: Any) -> None:
    assert response.status_code == 409, (response.status_code, response.content[:300])
    assert problem(response)["type"].endswith("in-progress")
    assert int(response["Retry-After"]) >= 1


def _original(response: Any) -> None:
    assert response.status_code == 201, (response.status_code, response.content[:300])
    assert "Idempotent-Replayed" not in response


def _replay_of(response: Any, original: Any) -> None:
    assert response.status_code == original.status_code
    assert response["Idempotent-Replayed"] == "true"
    assert response.content == original.content
    assert response["Location"] == original["Location"]
    assert response["Content-Type"] == original["Content-Type"]


# --- a duplicate in flight: 409 at once, never a queue ---------------------------------------


def test_in_flight_duplicate_is_409_at_once_and_never_waits_on_a_lock() -> None:
    key, body = new_key(), {"sleep": 3}
    holder = _start(key, body)
    with LockWatch() as watch:
        tries = [timed_send(key, body) for _ in range(5)]
        polls_during = watch.polls
    still_holding = holder.alive
    first = holder.join()
    latencies = [round(t.seconds * 1000, 1) for t in tries]
    print(f"\n409 latencies (ms): {latencies}, median {statistics.median(latencies)}")
    assert watch.waiting == [], "a backend waited on a lock"
    assert polls_during > 0
    for attempt in tries:
        assert attempt.seconds < AT_ONCE, latencies
        _busy(attempt.response)
    assert still_holding, "the holder finished during the duplicates: nothing was tested"
    _original(first)
    assert charges(key) == 1


def test_holder_commits_then_the_retry_replays_byte_identical() -> None:
    key, body = new_key(), {"sleep": 1.5}
    holder = _start(key, body)
    _busy(send(key, body))
    first = holder.join()
    _original(first)
    _replay_of(send(key, body), first)
    assert charges(key) == 1


@pytest.mark.parametrize("fails", [{"status": 503}, {"raise": True}], ids=["5xx", "exception"])
def test_holder_rolls_back_then_the_retry_runs_once(fails: dict[str, Any]) -> None:
    key, body = new_key(), {"sleep": 1.5, **fails}
    holder = _start(key, body)
    _busy(send(key, body))
    assert holder.join().status_code >= 500
    assert charges(key) == 0
    assert not IdempotencyEntry.objects.filter(key=key).exists()
    retry = send(key, {"amount": 100})
    _original(retry)
    _replay_of(send(key, {"amount": 100}), retry)
    assert charges(key) == 1


# --- a worker killed mid-view ------------------------------------------------------------------


def test_sigkilled_worker_leaves_nothing_to_wait_for_and_the_retry_runs_once() -> None:
    """Default lease (60 s): under "lock" nothing waits for it; the kill is a plain rollback."""
    key, body = new_key(), {"sleep": 60}
    worker = Worker(key, body, "lock")
    try:
        pid = worker.wait_mid_view()
        locked_by = advisory_holder(_target(key))
    finally:
        worker.kill()
    wait_for(lambda: not backend_alive(pid), 10, "end of the killed worker's backend")
    # Nothing is left to wait for: no entry (so no lease), and the advisory lock went
    # with the backend. The retry then runs at once, whatever the machine's speed.
    assert not IdempotencyEntry.objects.filter(key=key).exists(), "a zombie claim was left"
    assert not advisory_holder(_target(key)), "the killed worker's lock outlived its backend"
    assert charges(key) == 0
    retry = send(key, body | {"sleep": 0})
    _original(retry)
    _replay_of(send(key, body | {"sleep": 0}), retry)
    assert charges(key) == 1
    assert locked_by == pid, "the worker's claim was not its advisory lock"


# --- a view waiting on its own row lock ---------------------------------------------------------


@BOTH
def test_view_waiting_2s_on_a_row_lock_does_not_time_out(protocol: str) -> None:
    """A plain transaction holds the row 2 s; the view's lease (1 s) is no timeout for it."""
    row = Charge.objects.create(reference="locked-row", amount=1)
    key = new_key()
    with psycopg.connect(dsn(), prepare_threshold=None) as other:
        other.execute("SELECT id FROM testapp_charge WHERE id = %s FOR UPDATE", (row.pk,))
        request = Background(key, {"lock_row": row.pk}, {"protocol": protocol, "lease": 1})
        waiting = wait_for(
            lambda: query(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock'"
            ),
            what="the view waiting on the row lock",
        )
        time.sleep(2)
        still_waiting = request.alive and backend_alive(waiting[0][0])
        other.commit()
    response = request.join()
    assert still_waiting
    _original(response)
    assert charges(key) == 1


# --- REPEATABLE READ ------------------------------------------------------------------------------


@contextmanager
def repeatable_read() -> Iterator[None]:
    """Every connection opened inside (each thread's) runs REPEATABLE READ transactions."""
    options = connection.settings_dict["OPTIONS"]
    repeatable = psycopg.IsolationLevel.REPEATABLE_READ
    connection.settings_dict["OPTIONS"] = {**options, "isolation_level": repeatable}
    connection.close()  # this thread's connection reopens with the new options
    try:
        assert race(1, lambda _i: _isolation())[0] == _isolation() == "repeatable read"
        yield
    finally:
        connection.settings_dict["OPTIONS"] = options
        connection.close()


@BOTH
def test_storm_under_repeatable_read_gives_no_5xx(protocol: str) -> None:
    """A claim meeting a row committed after its snapshot fails with 40001: that is a 409."""
    totals: Counter[str] = Counter()
    with repeatable_read():
        for trial in range(20):
            key = f"rr-{trial}-{new_key()}"
            body = {"amount": 100, "sleep": 0.02 if trial % 2 else 0}
            totals += _storm_kinds(race(8, _sender(key, body, protocol)))
            assert charges(key) == 1
    print(f"\nREPEATABLE READ storm ({protocol}), 20 keys x 8: {dict(totals)}")
    assert totals["original"] == 20
    assert totals["409"] + totals["replay"] == 20 * 7


@BOTH
def test_wait_under_repeatable_read_replays_the_answer(protocol: str) -> None:
    """``wait=5`` keeps its promise under REPEATABLE READ too: the committed answer, replayed."""
    key, body = new_key(), {"sleep": 1.5}
    with repeatable_read():
        holder = _start(key, body, protocol)
        duplicate = timed_send(key, body, protocol=protocol, wait=5)
        first = holder.join()
    print(
        f"\nREPEATABLE READ wait=5 ({protocol}): {duplicate.response.status_code} after "
        f"{duplicate.seconds:.2f} s"
    )
    _original(first)
    _replay_of(duplicate.response, first)
    assert charges(key) == 1


def _sender(key: str, body: dict[str, Any], protocol: str) -> Callable[[int], Any]:
    return lambda _index: send(key, body, protocol)


def _isolation() -> str:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SHOW transaction_isolation")
        row = cursor.fetchone()
    return str(row[0]) if row else ""


def _storm_kinds(answers: list[Any]) -> Counter[str]:
    assert not [a for a in answers if isinstance(a, BaseException)], answers
    assert not [a for a in answers if a.status_code >= 500], [a.status_code for a in answers]
    originals = [a for a in answers if a.status_code == 201 and "Idempotent-Replayed" not in a]
    assert len(originals) == 1, [a.status_code for a in answers]
    kinds: Counter[str] = Counter(original=1)
    for answer in answers:
        if answer is originals[0]:
            continue
        if answer.status_code == 409:
            _busy(answer)
            kinds["409"] += 1
        else:
            _replay_of(answer, originals[0])
            kinds["replay"] += 1
    return kinds


# --- waiting for the answer -----------------------------------------------------------------------


@BOTH
def test_wait_5_duplicate_mid_flight_gets_the_originals_answer_replayed(protocol: str) -> None:
    key, body = new_key(), {"sleep": 1.5}
    holder = _start(key, body, protocol)
    duplicate = timed_send(key, body, protocol=protocol, wait=5)
    first = holder.join()
    _original(first)
    _replay_of(duplicate.response, first)
    assert duplicate.seconds < 5
    assert charges(key) == 1


def test_wait_duplicate_runs_once_when_the_holder_rolls_back() -> None:
    """Under "lock" the waiter wakes on the rollback and claims the key itself."""
    key = new_key()
    holder = _start(key, {"sleep": 1.5, "status": 503})
    duplicate = send(key, {"amount": 100}, wait=5)
    assert holder.join().status_code == 503
    _original(duplicate)
    assert charges(key) == 1


@BOTH
def test_wait_is_bounded(protocol: str) -> None:
    """``wait=0.3`` against a holder busy for 3 s: 409 after about 0.3 s, not after 3 s."""
    key, body = new_key(), {"sleep": 3}
    holder = _start(key, body, protocol)
    with LockWatch() as watch:
        duplicate = timed_send(key, body, protocol=protocol, wait=0.3)
    still_holding = holder.alive
    holder.join()
    print(f"\nwait=0.3 ({protocol}): 409 after {duplicate.seconds:.3f} s")
    assert still_holding
    _busy(duplicate.response)
    assert 0.29 <= duplicate.seconds < 0.3 + AT_ONCE
    if protocol == "lease":
        assert watch.waiting == [], "waiting under lease must poll, not hold a lock wait"
    assert charges(key) == 1


# --- a rolling deploy: both protocols on one table --------------------------------------------


def test_lock_request_honours_a_live_lease_claim_past_its_lease() -> None:
    """A "lease" request works 4 s on a 1 s lease: 409 before and after its lease, never twice."""
    key, body = new_key(), {"work": 4}
    holder = _start(key, body, "lease", lease=1)
    during_lease = send(key, body, "lock")
    lease_was_live = not _lease_passed(key)
    wait_for(lambda: _lease_passed(key), 10, "the end of the lease")
    past_lease = send(key, body, "lock")
    still_running = holder.alive
    first = holder.join()
    _original(first)
    assert still_running, "the holder ended before its lease passed: nothing was tested"
    assert lease_was_live
    _busy(during_lease)
    _busy(past_lease)
    _replay_of(send(key, body, "lock"), first)
    assert charges(key) == 1


def test_lock_request_takes_over_a_killed_lease_claim_once_its_lease_passed() -> None:
    key, body = new_key(), {"amount": 100}
    worker = Worker(key, body, "lease", lease=3, work=60)
    try:
        pid = worker.wait_mid_view()
    finally:
        worker.kill()
    wait_for(lambda: not backend_alive(pid), 10, "end of the killed worker's backend")
    entry = IdempotencyEntry.objects.get(key=key)
    assert entry.status == IdempotencyEntry.Status.IN_PROGRESS  # the lease protocol's zombie
    early = send(key, body, "lock")
    lease_was_live = not _lease_passed(key)
    wait_for(lambda: _lease_passed(key), 10, "the end of the lease")
    taken = send(key, body, "lock")
    if lease_was_live:
        _busy(early)
    _original(taken)
    _replay_of(send(key, body, "lock"), taken)
    assert charges(key) == 1


def test_lease_request_meets_a_lock_holder_with_409_at_once() -> None:
    key, body = new_key(), {"sleep": 3}
    holder = _start(key, body, "lock")
    with LockWatch() as watch:
        duplicate = timed_send(key, body, protocol="lease")
    still_holding = holder.alive
    first = holder.join()
    assert still_holding
    _busy(duplicate.response)
    assert duplicate.seconds < AT_ONCE
    assert watch.waiting == []
    _original(first)
    _replay_of(send(key, body, "lease"), first)
    assert charges(key) == 1


def _lease_passed(key: str) -> bool:
    rows = query(
        "SELECT locked_until <= statement_timestamp() FROM idempotency_django_idempotencyentry "
        "WHERE key = %s",
        (key,),
    )
    return bool(rows and rows[0][0])


# --- a deadlock through a caller's own row lock ----------------------------------------------


def test_claim_waiting_while_its_caller_holds_a_row_the_holder_wants_is_409_not_an_error() -> None:
    """40P01 on the claim is "retry later".

    W (a caller's transaction) locks a row, then waits (``wait=5``) for the key that
    H holds; H then wants W's row: a deadlock. PostgreSQL breaks it by failing
    the one that waited first, W's wait: W must get ``RequestInProgress``, its own
    transaction still usable, and H must finish.
    """
    from idempotency_django import idempotent_call
    from idempotency_django.exceptions import RequestInProgress

    row = Charge.objects.create(reference="contended-row", amount=1)
    key, locked = new_key(), threading.Event()
    holder_done: list[object] = []

    def holder() -> None:
        try:
            with idempotent_call(key, scope="deadlock", protocol="lock") as call:
                assert locked.wait(10)
                time.sleep(0.3)  # W is waiting on our key by now
                Charge.objects.select_for_update().get(pk=row.pk)
                call.result = {"ok": True}
            holder_done.append(call.result)
        except BaseException as exc:
            holder_done.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=holder, daemon=True)
    thread.start()
    wait_for(lambda: advisory_holder(_target(f"deadlock\x1f{key}")), what="holder's claim")
    with transaction.atomic():
        Charge.objects.select_for_update().get(pk=row.pk)
        locked.set()
        waiting = idempotent_call(key, scope="deadlock", protocol="lock", wait=5)
        with pytest.raises(RequestInProgress), waiting:
            raise AssertionError("ran while the holder held the key")
        assert Charge.objects.filter(pk=row.pk).exists()  # our transaction is still usable
    thread.join(30)
    assert holder_done == [{"ok": True}]
