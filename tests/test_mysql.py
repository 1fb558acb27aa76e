"""MySQL and MariaDB: what InnoDB does differently from PostgreSQL, proven on a real server.

- A duplicate INSERT waits on the holder's row lock instead of failing: the
  holder locks its entry through the primary key only, so a duplicate's claim
  fails (1062) at once and answers 409 while the view runs.
- Default collations fold case and pad spaces: keys must stay byte-distinct.
- A worker SIGKILLed or a connection KILLed mid-view: InnoDB rolls the business
  transaction back; the committed claim holds the key until its lease passes,
  then exactly one retry runs.
- Errors 1205/1213/3572 mean "busy" (409); a lost connection means 503.

The tests marked ``requires_mysql`` run in the MariaDB pass (``make test-mariadb``).
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import OperationalError, connection, connections, transaction
from django.test import Client

from idempotency_django._protocol.execution import translate
from idempotency_django._storage.store import lease, mysql
from idempotency_django._storage.store.sql import Claim, Existing, Target
from idempotency_django.exceptions import RequestInProgress, StoreUnavailable
from idempotency_django.models import IdempotencyEntry
from tests.helpers import charges, new_key, post
from tests.lock_helpers import ROOT, send, wait_for

pytestmark = pytest.mark.django_db(transaction=True)
PATH = "/protocols/charges/"  # tests.testapp.lock_views.by_headers: X-Lease, sleep


@pytest.fixture
def client() -> Client:
    return Client(raise_request_exception=False)


# --- every database -----------------------------------------------------------------------------


def test_keys_differing_in_case_or_a_trailing_space_are_different_keys(client: Client) -> None:
    """MySQL's default collations would make these one key, and replay one's answer to the others."""
    keys = {"case-key": "case-key", "CASE-KEY": "CASE-KEY", '"case-key "': "case-key "}
    for header, amount in zip(keys, (1, 2, 3), strict=True):
        response = post(client, "/charges/", header, {"amount": amount})
        assert response.status_code == 201, response.content
        assert "Idempotent-Replayed" not in response
    stored = sorted(IdempotencyEntry.objects.values_list("key", flat=True))
    assert stored == sorted(keys.values())


@pytest.mark.parametrize("code", [1205, 1213, 3572])
def test_mysql_lock_errors_while_claiming_are_busy(code: int) -> None:
    mysqldb = pytest.importorskip("MySQLdb")
    error = OperationalError(code, "Lock wait timeout exceeded; try restarting transaction")
    error.__cause__ = mysqldb.OperationalError(code, "busy")
    assert mysql.busy(error)
    assert isinstance(translate(error), RequestInProgress)


@pytest.mark.parametrize("code", [2006, 2013])
def test_a_lost_mysql_connection_while_claiming_is_unavailable(code: int) -> None:
    mysqldb = pytest.importorskip("MySQLdb")
    error = OperationalError(code, "Lost connection to server during query")
    error.__cause__ = mysqldb.OperationalError(code, "gone")
    assert not mysql.busy(error)
    assert isinstance(translate(error), StoreUnavailable)


# --- MySQL and MariaDB ----------------------------------------------------------------------------


def _target(key: str, lease_seconds: float = 60) -> Target:
    return Target(
        "default", "", key, "f" * 64, timedelta(seconds=lease_seconds), timedelta(hours=1)
    )


@pytest.mark.requires_mysql
def test_a_duplicate_claim_fails_at_once_while_the_holder_has_its_row_locked() -> None:
    """InnoDB's duplicate check would wait for a lock on the unique index's record.

    The holder's lock is on the primary key only: the duplicate's INSERT meets
    the committed row, fails with 1062 and sees the entry in progress, at once.
    """
    target = _target(new_key())
    claim = lease.claim(target, bounded=False)
    assert isinstance(claim, Claim)
    locked, release = threading.Event(), threading.Event()

    def holder() -> None:
        try:
            with transaction.atomic():
                assert lease.hold(claim, target, bounded=False)
                locked.set()
                release.wait(30)
        finally:
            connections.close_all()

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert locked.wait(30)
        started = time.monotonic()
        seen = lease.claim(target, bounded=False)
        took = time.monotonic() - started
    finally:
        release.set()
        thread.join(30)
    assert isinstance(seen, Existing)
    assert seen.response is None
    assert not seen.dead
    assert took < 0.5, f"the duplicate claim waited {took:.2f} s on the holder's lock"


@pytest.mark.requires_mysql
def test_a_held_entry_past_its_lease_is_neither_taken_over_nor_purged() -> None:
    from idempotency_django.purge import purge

    target = _target(new_key(), lease_seconds=0.2)
    claim = lease.claim(target, bounded=False)
    assert isinstance(claim, Claim)
    with transaction.atomic():
        assert lease.hold(claim, target, bounded=False)
        time.sleep(0.4)  # the lease has passed; this transaction still holds the row

        def from_outside() -> tuple[Any, Any]:
            try:
                return lease.take_over(target), purge()
            finally:
                connections.close_all()

        results: list[Any] = []
        thread = threading.Thread(target=lambda: results.append(from_outside()))
        thread.start()
        thread.join(30)
    taken, purged = results[0]
    assert taken is None
    assert purged.abandoned == 0
    assert IdempotencyEntry.objects.get(key=target.key).owner == claim.owner
    # Once the holder is gone, the dead entry is taken over.
    assert isinstance(lease.take_over(target), Claim)


@pytest.mark.requires_mysql
def test_the_clock_is_utc_whatever_the_sessions_time_zone() -> None:
    """UTC_TIMESTAMP(), not NOW(): a session in another zone writes the same instants."""
    with connection.cursor() as cursor:
        cursor.execute("SET time_zone = '+05:00'")
    try:
        target = _target(new_key())
        assert isinstance(lease.claim(target, bounded=False), Claim)
        entry = IdempotencyEntry.objects.get(key=target.key)
        seen = lease.claim(target, bounded=False)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET time_zone = '+00:00'")
    assert isinstance(seen, Existing)
    assert not seen.dead
    assert 59 < (entry.locked_until - entry.created_at).total_seconds() <= 60
    assert abs((entry.created_at - _server_utc()).total_seconds()) < 5
    assert 3590 < seen.remaining <= 3600


def _server_utc() -> dt.datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT UTC_TIMESTAMP(6)")
        now: dt.datetime = cursor.fetchone()[0]
    return now.replace(tzinfo=dt.UTC)


# --- crashes ------------------------------------------------------------------------------------


def _mysql_url() -> str:
    db = connection.settings_dict
    return (
        f"mysql://{db.get('USER') or 'root'}@{db.get('HOST') or '127.0.0.1'}:"
        f"{db.get('PORT') or 3306}/{db['NAME']}"
    )


def _writer_of_charges() -> int | None:
    """The connection (not ours) whose open transaction has written rows: a view mid-flight.

    InnoDB refreshes this table's cache only when it was not read for 0.1 s:
    polled faster, it never changes. Only connections to this test database count:
    the server may be serving another suite's meanwhile (a second checkout's run).
    """
    time.sleep(0.15)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT trx_mysql_thread_id FROM information_schema.innodb_trx "
            "WHERE trx_rows_modified > 0 AND trx_mysql_thread_id <> CONNECTION_ID() "
            "AND trx_mysql_thread_id IN "
            "(SELECT id FROM information_schema.processlist WHERE db = DATABASE())"
        )
        row = cursor.fetchone()
    return None if row is None else int(row[0])


def _connection_alive(thread_id: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM information_schema.processlist WHERE id = %s", [thread_id])
        return cursor.fetchone() is not None


_WORKER = """
import sys
import django
django.setup()
from django.test import Client
key, lease = sys.argv[1:3]
headers = {"Idempotency-Key": key, "X-Protocol": "lease", "X-Work": "60"}
if lease:
    headers["X-Lease"] = lease
Client(raise_request_exception=False).post(
    "/protocols/charges/", '{"amount": 100}', content_type="application/json", headers=headers
)
"""


@pytest.fixture
def killed_worker() -> tuple[str, int]:
    """A process SIGKILLed in the middle of its view (charge written, nothing committed)."""
    key = new_key()
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="tests.settings", DATABASE_URL=_mysql_url())
    process = subprocess.Popen(
        [sys.executable, "-c", _WORKER, key, ""],  # the default lease (60 s)
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        thread_id = wait_for(
            lambda: process.poll() is None and _writer_of_charges(), 60, "worker mid-view"
        )
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(30)
    assert process.returncode == -signal.SIGKILL, process.stderr
    return key, int(thread_id)


def _lease_passes(key: str) -> None:
    """The claim's lease ends now, by the server's clock: what waiting it out would do,
    without a sleep that a loaded machine could outrun or overrun."""
    IdempotencyEntry.objects.filter(key=key).update(
        locked_until=_server_utc() - dt.timedelta(seconds=1)
    )


@pytest.mark.requires_mysql
def test_sigkilled_worker_commits_nothing_and_its_key_runs_once_after_the_lease(
    killed_worker: tuple[str, int],
) -> None:
    key, thread_id = killed_worker
    wait_for(lambda: not _connection_alive(thread_id), 30, "the killed worker's connection")
    assert charges(key) == 0, "the killed transaction committed"
    entry = IdempotencyEntry.objects.get(key=key)
    assert entry.status == IdempotencyEntry.Status.IN_PROGRESS  # the lease claim stays
    assert (entry.locked_until - _server_utc()).total_seconds() > 5  # the default 60 s lease
    assert send(key, None, "lease", lease=3.0).status_code == 409  # in flight, for all we know
    _lease_passes(key)
    retry = send(key, None, "lease", lease=3.0)
    assert retry.status_code == 201
    assert "Idempotent-Replayed" not in retry
    replay = send(key, None, "lease", lease=3.0)
    assert replay["Idempotent-Replayed"] == "true"
    assert replay.content == retry.content
    assert charges(key) == 1


@pytest.mark.requires_mysql
def test_killed_connection_mid_view_is_a_5xx_commits_nothing_and_the_retry_runs_once() -> None:
    key = new_key()
    answers: list[Any] = []

    def request() -> None:
        try:
            answers.append(send(key, None, "lease", lease=1.0, work=2))
        finally:
            connections.close_all()

    thread = threading.Thread(target=request)
    thread.start()
    victim = wait_for(_writer_of_charges, 30, "request mid-view")
    with connection.cursor() as cursor:
        cursor.execute("KILL %s", [victim])
    thread.join(30)
    assert answers[0].status_code >= 500
    assert charges(key) == 0
    # The claim is released on a new connection; were that impossible, its lease
    # would free the key.
    entry = IdempotencyEntry.objects.filter(key=key).first()
    if entry is not None:
        time.sleep(max(0.0, (entry.locked_until - _server_utc()).total_seconds()) + 0.2)
    retry = send(key, None, "lease", lease=1.0)
    assert retry.status_code == 201
    assert "Idempotent-Replayed" not in retry
    assert charges(key) == 1


@pytest.mark.requires_mysql
def test_lock_protocol_is_refused_on_mysql() -> None:
    from idempotency_django._protocol.options import protocol_for

    with pytest.raises(ImproperlyConfigured, match="lease"):
        protocol_for("default", "lock")
    assert protocol_for("default", None) == "lease"


# --- why "lock" is not offered here (docs/protocols.rst) -----------------------------------------


def _raw_connection() -> Any:
    """A connection of our own to the test database, outside Django's handling."""
    import MySQLdb

    db = connection.settings_dict
    return MySQLdb.connect(
        host=db.get("HOST") or "127.0.0.1",
        port=int(db.get("PORT") or 3306),
        user=db.get("USER") or "root",
        passwd=db.get("PASSWORD") or "",
        database=db["NAME"],
    )


@pytest.mark.requires_mysql
def test_innodb_makes_a_duplicate_insert_wait_for_an_uncommitted_claim() -> None:
    """A claim inside the view's transaction would make every duplicate queue behind the view."""
    table = connection.ops.quote_name(IdempotencyEntry._meta.db_table)
    holder, duplicate = _raw_connection(), _raw_connection()
    try:
        holder.autocommit(False)
        row = ("", new_key(), "f" * 64, "0" * 32)
        holder.cursor().execute(
            f"INSERT INTO {table} (tenant, `key`, fingerprint, status, owner, response_headers, "
            "response_reason, locked_until, created_at, expires_at) VALUES "
            "(%s, %s, %s, 'in_progress', %s, '[]', '', UTC_TIMESTAMP(), UTC_TIMESTAMP(), "
            "UTC_TIMESTAMP())",
            row,
        )
        cursor = duplicate.cursor()
        cursor.execute("SET SESSION innodb_lock_wait_timeout = 1")
        started = time.monotonic()
        with pytest.raises(pytest.importorskip("MySQLdb").OperationalError) as waited:
            cursor.execute(
                f"INSERT INTO {table} (tenant, `key`, fingerprint, status, owner, "
                "response_headers, response_reason, locked_until, created_at, expires_at) "
                "VALUES (%s, %s, %s, 'in_progress', %s, '[]', '', UTC_TIMESTAMP(), "
                "UTC_TIMESTAMP(), UTC_TIMESTAMP())",
                row,
            )
        assert waited.value.args[0] == 1205  # lock wait timeout: it queued, it did not fail
        assert time.monotonic() - started >= 0.9
    finally:
        holder.close()
        duplicate.close()


@pytest.mark.requires_mysql
def test_get_lock_survives_a_rollback() -> None:
    """MySQL's only advisory lock belongs to the session, not to the transaction."""
    session, other = _raw_connection(), _raw_connection()
    try:
        session.autocommit(False)
        cursor = session.cursor()
        cursor.execute("SELECT GET_LOCK('idempotency-test', 0)")
        session.rollback()
        probe = other.cursor()
        probe.execute("SELECT GET_LOCK('idempotency-test', 0)")
        assert probe.fetchone() == (0,), "the rollback released the session's lock"
    finally:
        session.close()
        other.close()
