"""The consumer API's core: see the package's docstring."""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextvars import ContextVar
from datetime import timedelta
from typing import Any, Final

from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from django.db import InterfaceError, OperationalError, connections

from idempotency_django import signals
from idempotency_django.calls import IdempotentCall, idempotent_call, namespaced
from idempotency_django.consumers import classify
from idempotency_django.consumers.counting import GivenUpMeanwhile, Noted, RunCount, RunsLost
from idempotency_django.consumers.policy import ACK, DEAD_LETTER, RETRY, GiveUp, Verdict
from idempotency_django.databases import default_alias
from idempotency_django.exceptions import RequestInProgress, StoreUnavailable
from idempotency_django.models import IdempotencyEntry

logger = logging.getLogger("idempotency_django.consumers")

DEFAULT_SCOPE: Final = "consumer"
_TENANT_MAX: Final = IdempotencyEntry._meta.get_field("tenant").max_length or 255
#: Errors of the claim, the record, the commit and the count: the store is away, never
#: counted (a handler's own are classified by :mod:`.classify`).
UNAVAILABLE_ERRORS: Final = (OperationalError, InterfaceError, StoreUnavailable)

_current: ContextVar[IdempotentCall | None] = ContextVar("idempotency_consumer", default=None)


def current_call() -> IdempotentCall:
    """Inside a handler run by :func:`consume`: its call (``.key``, ``.derive(namespace)``)."""
    call = _current.get()
    if call is None:
        raise RuntimeError("current_call() is for a handler that consume() is running.")
    return call


def consume(
    message_id: str,
    handler: Callable[[], Any],
    *,
    tenant: str = "",
    scope: str = DEFAULT_SCOPE,
    policy: GiveUp | None = None,
    attempt: int | None = None,
    database: str | None = None,
    protocol: str | None = None,
    ttl: float | timedelta | None = None,
) -> Verdict:
    """Run ``handler()`` once per (tenant, message id) and return the :class:`Verdict`.

    ``handler`` runs in the claim's transaction on the entries' database (its
    writes there commit with the record, once) and returns a JSON value, stored
    and handed to duplicates as ``Verdict.result``. ``attempt`` is the broker's
    own count of this message's failures so far plus one (e.g. Celery's
    ``retries + 1``); without it each run is counted in ``ConsumerFailure``
    before it starts, by the delivery holding the claim only (:mod:`.counting`).
    An id (or tenant) the store cannot hold is a dead letter.
    """
    rules = policy or GiveUp()
    using = database or default_alias()
    namespaced(scope, "-")  # a wrong scope is the programmer's: raised, not a verdict
    refused = _unstorable(scope, tenant, message_id)
    if refused is not None:
        return _refuse(tenant, message_id, refused)
    key = namespaced(scope, message_id)
    if attempt is None:
        _require_table()
    _reconnect_if_broken(using)
    try:
        runs = None if attempt is not None else _arrived(using, tenant, key, rules)
    except UNAVAILABLE_ERRORS as away:
        return _unavailable(using, rules, away)
    ran: list[IdempotentCall] = []  # the call the handler ran in, if it ran
    try:
        with idempotent_call(
            message_id,
            scope=scope,
            tenant=tenant,
            database=using,
            protocol=protocol,
            ttl=ttl,
            origin="consumer",
            guard=runs,
        ) as call:
            if not call.replayed:
                if runs is not None:
                    runs.check()
                ran.append(call)
                call.result = _run(call, handler)
                if runs is not None:
                    from idempotency_django.consumers import failures

                    failures.forget(using, tenant, key)  # commits with the result
    except GivenUpMeanwhile as given:
        return _give_up(using, tenant, key, attempt, given, given.failures, None, marked=True)
    except RequestInProgress as held:
        _uncount(using, tenant, key, runs)  # counted, then taken over before it began
        return Verdict(RETRY, float(held.retry_after), "in_progress", error=held)
    except Exception as failed:  # noqa: BLE001 - the handler's or the store's: rolled back
        if classify.store_away(failed, using):
            _reconnect_if_broken(using)
            _uncount(using, tenant, key, runs)
            dead = _given_up_since(runs)
            if dead is not None:  # its claim lost, the message given up on meanwhile
                return _give_up(using, tenant, key, attempt, failed, dead, None, marked=True)
            return _unavailable(using, rules, failed)
        return _failed(using, tenant, key, rules, attempt, failed, ran[0] if ran else None, runs)
    return Verdict(ACK, outcome="replayed" if call.replayed else "executed", result=call.result)


def identified(find: Callable[[], str]) -> str | Verdict:
    """A preset's message id, or the dead letter of a message without a readable one.

    The id is the producer's: a message without one (or whose ``key=`` cannot read
    it: a ``ValueError``, malformed JSON among them) is dead-lettered unrun, never
    raised out of the consumer loop, so the messages behind it are handled.
    """
    try:
        return find()
    except ValueError as unreadable:
        return _refuse("", "", str(unreadable))


def _unstorable(scope: str, tenant: str, message_id: str) -> str | None:
    """Why the store cannot hold this id (the producer's choice), or ``None``."""
    if not isinstance(message_id, str):
        raise TypeError(f"consume() takes the message id as a str, got {message_id!r}")
    if not message_id:
        return "the message id is empty"
    if "\x00" in message_id or "\x00" in tenant:
        return "the message id or tenant holds a NUL character"
    if not (_encodes(message_id) and _encodes(tenant)):  # a lone surrogate ("\udc80" in JSON)
        return "the message id or tenant is not valid Unicode (a lone surrogate)"
    if len(tenant) > _TENANT_MAX:
        return f"the tenant is longer than {_TENANT_MAX} characters"
    try:
        namespaced(scope, message_id)
    except ValueError as error:
        return str(error)
    return None


def _encodes(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8, as every database driver sends it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _refuse(tenant: str, message_id: str, why: str) -> Verdict:
    """A dead letter for an id the store cannot hold: nothing ran, nothing was stored."""
    error = ValueError(f"consume(): {why}; the message is dead-lettered unrun")
    digest = signals.key_digest(tenant, message_id)
    logger.error("consumer: [key %s] dead-lettered: %s", digest, why)
    signals.send(
        signals.dead_lettered,
        sender="consumer",
        key_digest=digest,
        attempts=0,
        error=error,
        uncertain=False,
    )
    return Verdict(DEAD_LETTER, outcome="unstorable", error=error)


def _require_table() -> None:
    # Before the first import of the model: outside INSTALLED_APPS it cannot load.
    if not apps.is_installed("idempotency_django.consumers"):
        raise ImproperlyConfigured(
            "consume() and max_attempts= count a message's runs in the ConsumerFailure "
            'table: add "idempotency_django.consumers" to INSTALLED_APPS and migrate '
            "(or pass attempt=, the broker's own count of the failures)."
        )


def _arrived(using: str, tenant: str, key: str, rules: GiveUp) -> RunCount:
    """The delivery's count, kept by the claim: counted only if this delivery runs."""
    from idempotency_django.consumers import failures

    own = not connections[using].in_atomic_block
    return RunCount(using, tenant, key, rules, own, failures.seen_dead(using, tenant, key))


def _uncount(using: str, tenant: str, key: str, runs: RunCount | None) -> None:
    """The run never began or the store went away: take back its count (best effort)."""
    if runs is None or not (runs.runs and runs.durable):
        return
    from idempotency_django.consumers import failures

    try:
        failures.uncount(using, tenant, key)
    except UNAVAILABLE_ERRORS:
        logger.warning("consumer: could not take back a delivery's count (store away)")


def _given_up_since(runs: RunCount | None) -> int | None:
    try:
        return None if runs is None else runs.given_up_since()
    except UNAVAILABLE_ERRORS:
        return None  # the store is away: a retry finds out


async def aconsume(message_id: str, handler: Callable[[], Any], **options: Any) -> Verdict:
    """:func:`consume` for ``async`` consumers: the handler (sync) runs in a worker thread."""
    from asgiref.sync import sync_to_async

    def run() -> Verdict:
        return consume(message_id, handler, **options)

    return await sync_to_async(run, thread_sensitive=True)()


def _run(call: IdempotentCall, handler: Callable[[], Any]) -> Any:
    token = _current.set(call)
    try:
        with classify.handler_errors():
            return handler()
    finally:
        _current.reset(token)


def _reconnect_if_broken(using: str) -> None:
    # A long-running consumer has no request boundary at which Django drops a
    # connection an outage broke (its atomic() closes one whose rollback failed, not
    # one that broke between transactions): drop it here, before claiming.
    conn = connections[using]
    if not conn.in_atomic_block:
        conn.close_if_unusable_or_obsolete()


def _unavailable(using: str, rules: GiveUp, error: BaseException) -> Verdict:
    logger.warning("consumer: idempotency store unavailable (%r); retry later", error)
    _reconnect_if_broken(using)
    return Verdict(RETRY, float(rules.unavailable_delay), "unavailable", error=error)


def _failed(
    using: str,
    tenant: str,
    key: str,
    rules: GiveUp,
    attempt: int | None,
    error: Exception,
    call: IdempotentCall | None,
    runs: RunCount | None = None,
    sender: str = "consumer",
) -> Verdict:
    noted = runs.noted if runs is not None else None
    marked = noted is not None  # while the run held the claim
    if noted is None:
        try:
            noted = _count(using, tenant, key, rules, attempt, error, runs)
        except GivenUpMeanwhile as given:  # the run lost its claim: a dead letter already
            noted, marked = Noted(given.failures, exhausted=True), True
        except UNAVAILABLE_ERRORS as away:
            return _unavailable(using, rules, away)
    if not noted.exhausted:
        logger.info("consumer: handler failed (%d so far): %r", noted.failures, error)
        delay = rules.delay(noted.failures)
        return Verdict(RETRY, delay, "failed", error=error, failures=noted.failures)
    lost = isinstance(error, RunsLost)
    return _give_up(
        using, tenant, key, attempt, error, noted.failures, call, sender, lost=lost, marked=marked
    )


def _count(
    using: str,
    tenant: str,
    key: str,
    rules: GiveUp,
    attempt: int | None,
    error: Exception,
    runs: RunCount | None,
) -> Noted:
    """The failures so far, counted after the rollback (the run could not note them)."""
    from idempotency_django.consumers import failures as table

    if runs is not None:
        return runs.tally(error)
    failures, age = (
        (attempt, 0.0) if attempt is not None else table.count(using, tenant, key, error, add=1)
    )
    return Noted(failures, rules.exhausted(failures, age))


def _give_up(
    using: str,
    tenant: str,
    key: str,
    attempt: int | None,
    error: Exception,
    failures: int,
    call: IdempotentCall | None,
    sender: str = "consumer",
    *,
    lost: bool = False,
    marked: bool = False,
) -> Verdict:
    if attempt is None and not marked:
        from idempotency_django.consumers import failures as table

        try:
            if sender == "consumer":
                # Kept, marked, for the admin; sent again later, the message starts afresh.
                table.gave_up(using, tenant, key, failures, error)
            else:  # a task's dead letter is its result's FAILURE (and the broker's)
                table.forget(using, tenant, key)
        except UNAVAILABLE_ERRORS:
            logger.warning("consumer: could not mark the failure count of a dead letter")
    digest = signals.key_digest(tenant, key)
    # A run that died may have reached anything outside the database before it did.
    uncertain = lost or (call is not None and call.derived)
    logger.error(
        "%s: [key %s] dead-lettered after %d failures: %r", sender, digest, failures, error
    )
    signals.send(
        signals.dead_lettered,
        sender=sender,
        key_digest=digest,
        attempts=failures,
        error=error,
        uncertain=uncertain,
    )
    if uncertain:
        signals.uncertain("dead_letter", using, key_digest=digest)
    return Verdict(DEAD_LETTER, outcome="exhausted", error=error, failures=failures)


def task_failed(
    error: Exception, *, scope: str, key: str, tenant: str, database: str | None, max_attempts: int
) -> bool:
    """Count an idempotent task's failure (``max_attempts=``): whether to give it up now.

    A database error is never counted (the store is away: the task's own retry
    comes back). Given up, the dead letter is logged and signalled (``sender`` ``"task"``).
    """
    using = database or default_alias()
    if classify.store_away(error, using):
        return False
    _require_table()
    stored = namespaced(scope, key)
    rules = GiveUp(max_attempts=max_attempts)
    verdict = _failed(using, tenant, stored, rules, None, error, None, None, sender="task")
    return verdict.action == DEAD_LETTER


def task_succeeded(*, scope: str, key: str, tenant: str, database: str | None) -> None:
    """Forget a task's failures, in its transaction (``max_attempts=``)."""
    _require_table()
    from idempotency_django.consumers import failures

    failures.forget(database or default_alias(), tenant, namespaced(scope, key))


__all__ = [
    "RunsLost",
    "aconsume",
    "consume",
    "current_call",
    "identified",
    "task_failed",
    "task_succeeded",
]
