"""One protected execution, under either protocol: claim, run once, record, or replay.

Shared by the HTTP core (:mod:`.core`) and the function API (:mod:`.calls`)::

    with claimed(target, "lock", wait=0, matches=fingerprint.matches) as run:
        if run.replay is None:
            ...the body, inside the transaction holding the claim...
            run.record(status, answer)

Under ``"lease"`` the claim commits first and the body's transaction takes its
row lock; under ``"lock"`` the claim is the first statement of the body's
transaction. Either way the body's writes and the recorded answer commit
together, and an exception rolls both back and frees the key.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from types import ModuleType
from typing import Protocol

from django.db import DatabaseError, InterfaceError, OperationalError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from idempotency_django import signals
from idempotency_django._protocol.responses import StoredResponse
from idempotency_django._storage.secret import server_secret
from idempotency_django._storage.store import PROTOCOLS, lock, mysql, pg, readonly, sqlite
from idempotency_django._storage.store.sql import (
    BUSY,
    Claim,
    Existing,
    Found,
    Target,
    is_postgres,
    read,
)
from idempotency_django._storage.store.sql import record as record_answer
from idempotency_django.exceptions import (
    AnswerTooLarge,
    KeyReused,
    RequestInProgress,
    StoreUnavailable,
)
from idempotency_django.models import IdempotencyEntry

_LOOKS = 3  # how often a row that vanished or isn't visible yet is looked for again
_POLL_FIRST, _POLL_MAX = 0.01, 0.25
RETRY_AFTER_MAX = 60  # seconds: the most a 409's Retry-After asks a client to wait
Matches = Callable[[str], bool]
logger = logging.getLogger("idempotency_django")


class Guard(Protocol):
    """A caller's own bookkeeping, done while its run holds the claim (a consumer counts
    its runs: only the delivery that runs the handler counts, never one that waited)."""

    def claimed(self, inside: bool) -> None:
        """The key is this run's; the body has not begun (raising gives the key back).

        ``inside``: in the body's transaction, whose rollback would take back what the
        guard writes there (``"lock"``); else between transactions (``"lease"``).
        """

    def failed(self, error: BaseException) -> None:
        """The body raised, in its transaction: not rolled back yet, the key still this run's."""


@dataclass
class Run:
    """What :func:`claimed` found: an answer to replay, or a claim to run the body under."""

    protocol: str
    replay: StoredResponse | None = None
    remaining: float = 0.0  # a replayed entry's seconds to live, by the database's clock
    claim_seconds: float = 0.0
    waited_seconds: float = 0.0
    running: bool = False  # the caller's body has started: its errors are its own
    recording: bool = False  # the body has returned: its answer is being stored, then committed
    guard: Guard | None = field(default=None, repr=False)
    _claim: Claim | None = field(default=None, repr=False)
    _ttl: timedelta = field(default=timedelta(0), repr=False)

    def _claimed(self, inside: bool) -> None:
        if self.guard is not None:
            self.guard.claimed(inside)

    @contextmanager
    def _body(self) -> Iterator[Run]:
        """Where the caller's body runs, in its transaction: a failure goes to the guard."""
        try:
            yield self
        except BaseException as error:
            if self.guard is not None:
                self.guard.failed(error)
            raise

    def record(self, status: str, answer: StoredResponse, last: bool = False) -> None:
        """Store the final answer in the body's transaction (fenced on the claim's owner).

        ``last``: the caller sends nothing more in this transaction, so the
        statement may carry its COMMIT (see ``store.carry``).
        """
        assert self._claim is not None, "record() is for a run that holds the claim"
        self.recording = True
        try:
            if isinstance(self._claim, readonly.Pending):
                readonly.record(self._claim, status, answer, self._ttl, last)
            elif not record_answer(self._claim, status, answer, self._ttl, last):
                raise RuntimeError("idempotency claim lost while its row lock was held")
        except OperationalError as exc:
            if not mysql.packet_too_large(exc):
                raise
            # The server refused the statement after the view's work: the same clear
            # answer as IDEMPOTENCY_MAX_STORED_BYTES gives, and nothing commits.
            raise AnswerTooLarge(
                "The answer is over the database's max_allowed_packet, so it could not be "
                "stored for replays; nothing was committed."
            ) from exc


def status_of(answer: StoredResponse) -> str:
    if answer.status < 400:
        return IdempotencyEntry.Status.COMPLETED
    return IdempotencyEntry.Status.FAILED_FINAL


@contextmanager
def claimed(
    target: Target, protocol: str, wait: float, matches: Matches, run: Run | None = None
) -> Iterator[Run]:
    """Yield a :class:`Run`; with ``run.replay`` unset, the body runs holding the claim.

    Pass ``run`` to read its timings even when claiming raises (409, 422, 503).
    """
    run = run or Run(protocol)
    run.protocol, run._ttl = protocol, target.ttl
    conn = connections[target.using]
    own = not conn.in_atomic_block  # a caller's transaction stays open
    try:
        if own:
            # Read (on first use: persisted) in autocommit, never in the body's
            # transaction: a rollback there must not take back the secret that this
            # process keeps using for lock ids and derived keys (a caller's open
            # transaction is secret.py's to step out of).
            server_secret(target.using)
        attempt = _attempt(PROTOCOLS[protocol], target, run, wait, matches, conn, own)
        if not attempt.proto.CLAIMS_IN_TRANSACTION:
            yield from _claim_first(attempt)
        elif attempt.read_only:
            with readonly.read_committed(conn):
                yield from _claim_loop(attempt, own)
        else:
            yield from _claim_loop(attempt, own)
    except (OperationalError, InterfaceError) as exc:
        if run.running and not (run.recording and pg.sqlstate(exc) in pg.SERIALIZATION_STATES):
            raise
        # Before the body, or a serialization failure at the record or at COMMIT
        # (SERIALIZABLE): the transaction rolled back whole, the key is free again.
        raise translate(exc, waited=wait, claiming=True) from exc


@dataclass
class _Attempt:
    """One :func:`claimed` call: what each claim attempt needs, worked out once."""

    proto: ModuleType
    target: Target
    run: Run
    matches: Matches
    deadline: float
    bounded: bool  # the transaction is ours: bound its idle time (PostgreSQL)
    read_only: bool  # the read-only claim (lock protocol, READ COMMITTED, PostgreSQL)


def _attempt(
    proto: ModuleType,
    target: Target,
    run: Run,
    wait: float,
    matches: Matches,
    conn: BaseDatabaseWrapper,
    own: bool,
) -> _Attempt:
    # Only a transaction we open ourselves gets the idle bound: a caller's own
    # transaction keeps its settings.
    bounded = own and target.idle is not None and is_postgres(conn)
    read_only = proto is lock and readonly.usable(conn, own)
    return _Attempt(proto, target, run, matches, time.monotonic() + wait, bounded, read_only)


def translate(
    exc: OperationalError | InterfaceError, waited: float = 0.0, *, claiming: bool = False
) -> RequestInProgress | StoreUnavailable:
    """The client error a database error met while claiming (``claiming``) stands for."""
    state = pg.sqlstate(exc)
    if state in pg.BUSY_STATES or mysql.busy(exc) or (state == pg.CANCELED and waited > 0):
        # Another transaction is at this key (and kept it for ``waited``): retry later.
        # A lock wait longer than the server's statement_timeout is cancelled (57014).
        return RequestInProgress(retry_after=_bounded_retry(waited))
    if sqlite.busy(exc):
        if claiming:
            # SQLite has one writer for the whole file: a claim that timed out on its lock
            # met another request's open transaction (under ATOMIC_REQUESTS, one whose
            # claim stays uncommitted while its view runs), maybe at this very key. The
            # store is there and nothing ran: retry later, as for MariaDB's lock wait 1205.
            logger.info("idempotency claim met SQLite's database lock (%s): 409", exc)
            return RequestInProgress(retry_after=_bounded_retry(waited))
        logger.warning(
            "idempotency store busy: SQLite lock contention (%s); see the SQLite settings "
            "in the operations guide (transaction_mode IMMEDIATE, timeout)",
            exc,
        )
    else:
        logger.error("idempotency store unreachable: %s", exc)
    return StoreUnavailable()


def _claim_loop(attempt: _Attempt, own: bool) -> Iterator[Run]:
    """Claim in the body's transaction; waits happen between transactions (``own``)."""
    target, run = attempt.target, attempt.run
    while True:
        refused: Exception | None = None
        try:
            try:
                with transaction.atomic(using=target.using):
                    try:
                        claim = _acquire(attempt, restart=own)
                    except (_Restart, RequestInProgress, KeyReused) as exc:
                        if not attempt.read_only:
                            raise
                        # The read-only claim wrote nothing: its transaction commits, which
                        # is the same, where a ROLLBACK would make psycopg deallocate every
                        # prepared statement (a round trip, and each parsed again after).
                        refused, claim = exc, None
                    if claim is not None:
                        run._claimed(inside=True)
                        run._claim, run.running = claim, True
                        with run._body():
                            yield run
                        return
            except DatabaseError as exc:
                if refused is None:
                    raise
                raise refused from exc  # its COMMIT failed: it wrote nothing, the answer stands
            if refused is not None:
                raise refused
            break
        except _Restart as restart:
            # Waited for outside the transaction: under REPEATABLE READ a snapshot
            # taken before the holder committed would never see its answer.
            _wait(target, restart.found, attempt.deadline, run)
    run.running = True
    yield run  # a replay: the claim's transaction (read only) has committed


def settled(target: Target, matches: Matches, run: Run) -> bool:
    """Whether the key has a final answer, read in autocommit before any claim (now in
    ``run.replay``); raises 422 for another payload.

    For a retry the client marked (``Idempotency-Retry``): one ``SELECT``, no
    transaction, no lock. A final answer never changes once committed, so
    reading it outside the claim is as safe as the replay cache's copy of it.
    Anything else (no entry, one in progress, one expired) is left to the
    claim, which then decides as for any request. The read counts as claiming
    time in ``run``; its database errors are translated as a claim's.
    """
    started = time.monotonic()
    try:
        found = read(target)
        return found is not None and not found.dead and _replayable(found, run, matches, target)
    except (OperationalError, InterfaceError) as exc:
        raise translate(exc, claiming=True) from exc
    finally:
        run.claim_seconds += time.monotonic() - started


class _Restart(Exception):
    """Leave the (so far read-only) transaction to wait, then claim in a new one."""

    def __init__(self, found: Found) -> None:
        super().__init__()
        self.found = found


def _claim_first(attempt: _Attempt) -> Iterator[Run]:
    """Claim in autocommit (``"lease"``), then run the body holding the entry's row lock."""
    target, run = attempt.target, attempt.run
    claim = _acquire(attempt)
    if claim is None:
        run.running = True
        yield run
        return
    try:
        run._claimed(inside=False)  # in autocommit: before the body's transaction
        with transaction.atomic(using=target.using):
            if not attempt.proto.hold(claim, target, attempt.bounded):
                # Taken over between our claim and our lock: the other request runs it.
                raise RequestInProgress()
            run._claim, run.running = claim, True
            with run._body():
                yield run
    except BaseException:
        _release(attempt.proto, claim)
        raise


def _acquire(attempt: _Attempt, restart: bool = False) -> Claim | None:
    """Our claim, or ``None`` with ``run.replay`` set; raises 409 (at the deadline) or 422.

    With ``restart``, waiting leaves the transaction first (raises ``_Restart``).
    """
    target, run, deadline = attempt.target, attempt.run, attempt.deadline
    started, looks, waited_before = time.monotonic(), 0, run.waited_seconds
    try:
        while True:
            found = _look(attempt)
            if isinstance(found, Claim) or _replayable(found, run, attempt.matches, target):
                return found if isinstance(found, Claim) else None
            if found is None and looks < _LOOKS:
                looks += 1  # committed or deleted after the statement's snapshot
                continue
            if restart:
                if deadline <= time.monotonic():
                    raise RequestInProgress(retry_after=retry_after(target, found, run))
                raise _Restart(found)
            _wait(target, found, deadline, run)
            looks = 0
    finally:
        run.claim_seconds += time.monotonic() - started - (run.waited_seconds - waited_before)


def retry_after(target: Target, found: Found, run: Run) -> int:
    """The 409's ``Retry-After``: how long the holder has held the key, up to its lease's end.

    A holder that has run ``a`` seconds is asked about again after about ``a``
    more, so that retries back off geometrically: against a holder that died
    with its lease (``"lease"``), a client obeying it retries a handful of times
    instead of once a second until the lease passes. The holder's age is read
    from its entry (its time to live left, against this key's TTL); a
    ``"lock"`` holder writes no entry, and is alive by construction (a dead
    one's rollback frees the key at once), so only the time this request
    already waited counts.
    """
    guess = run.waited_seconds
    if isinstance(found, Existing) and found.response is None and not found.dead:
        age = target.ttl.total_seconds() - found.remaining
        lease_left = target.lease.total_seconds() - age
        guess = max(guess, min(age, lease_left))
    return _bounded_retry(guess)


def _bounded_retry(seconds: float) -> int:
    return max(1, min(RETRY_AFTER_MAX, round(seconds)))


def _replayable(found: Found, run: Run, matches: Matches, target: Target) -> bool:
    """Whether ``found`` is a final answer (now in ``run.replay``, opened); raises 422.

    An answer that does not open (tampered, moved, its key gone) raises a 500 problem.
    """
    if not isinstance(found, Existing):
        return False
    if not matches(found.fingerprint):
        raise KeyReused()
    if found.response is None:
        return False
    run.replay = found.opened(target)
    run.remaining = found.remaining
    return True


def _wait(target: Target, found: Found, deadline: float, run: Run) -> None:
    """Wait a while for the key's holder (never past ``deadline``), else raise 409."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise RequestInProgress(retry_after=retry_after(target, found, run))
    begun = time.monotonic()
    if found is BUSY and is_postgres(connections[target.using]):
        pg.wait_for_lock(target, left)  # wakes when the holder commits or rolls back
    else:
        # A lease holder's transaction holds nothing we can wait on: poll, backing off.
        time.sleep(min(max(run.waited_seconds, _POLL_FIRST), _POLL_MAX, left))
    run.waited_seconds += time.monotonic() - begun


def _look(attempt: _Attempt) -> Found:
    """One claim attempt (the read-only claim where it holds); takes a dead holder's key over."""
    target, proto = attempt.target, attempt.proto
    if attempt.read_only:
        found = readonly.claim(target, attempt.bounded, attempt.deadline - time.monotonic())
    else:
        found = proto.claim(target, attempt.bounded)
    if isinstance(found, Existing) and found.dead:
        taken = proto.take_over(target)
        if taken is not None and found.response is None:
            # Only once committed: under "lock" a rolled-back view undoes the takeover.
            transaction.on_commit(lambda: _reclaimed(target), using=target.using)
        return taken if isinstance(taken, Claim) else None
    return found


def _reclaimed(target: Target) -> None:
    signals.send(
        signals.entry_reclaimed, sender="takeover", how="takeover", count=1, database=target.using
    )
    signals.uncertain(
        "takeover", target.using, key_digest=signals.key_digest(target.tenant, target.key)
    )


def _release(proto: ModuleType, claim: Claim) -> None:
    try:
        proto.release(claim)
    except (OperationalError, InterfaceError):
        # The lease frees the key once it passes; nothing committed meanwhile.
        logger.warning("could not release an idempotency claim; its lease will expire")
