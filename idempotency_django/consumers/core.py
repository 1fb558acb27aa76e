"""The consumer API's core: see the package's docstring."""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextvars import ContextVar
from datetime import timedelta
from typing import Any, Final

from django.db import InterfaceError, OperationalError, connections

from idempotency_django import signals
from idempotency_django.calls import IdempotentCall, idempotent_call, namespaced
from idempotency_django.consumers.policy import ACK, DEAD_LETTER, RETRY, GiveUp, Verdict
from idempotency_django.databases import default_alias
from idempotency_django.exceptions import RequestInProgress, StoreUnavailable

logger = logging.getLogger("idempotency_django.consumers")

DEFAULT_SCOPE: Final = "consumer"
#: Database errors that say the store is away (not the handler's fault): never counted.
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
    ``retries + 1``); without it failures are counted in ``ConsumerFailure``.
    """
    rules = policy or GiveUp()
    using = database or default_alias()
    key = namespaced(scope, message_id)
    _reconnect_if_broken(using)
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
        ) as call:
            if not call.replayed:
                ran.append(call)
                call.result = _run(call, handler)
                if attempt is None:
                    from idempotency_django.consumers import failures

                    failures.forget(using, tenant, key)  # commits with the result
    except RequestInProgress as held:
        return Verdict(RETRY, float(held.retry_after), "in_progress", error=held)
    except UNAVAILABLE_ERRORS as away:
        return _unavailable(using, rules, away)
    except Exception as failed:  # noqa: BLE001 - the handler's failure: rolled back, key free
        return _failed(using, tenant, key, rules, attempt, failed, ran[0] if ran else None)
    return Verdict(ACK, outcome="replayed" if call.replayed else "executed", result=call.result)


async def aconsume(message_id: str, handler: Callable[[], Any], **options: Any) -> Verdict:
    """:func:`consume` for ``async`` consumers: the handler (sync) runs in a worker thread."""
    from asgiref.sync import sync_to_async

    def run() -> Verdict:
        return consume(message_id, handler, **options)

    return await sync_to_async(run, thread_sensitive=True)()


def _run(call: IdempotentCall, handler: Callable[[], Any]) -> Any:
    token = _current.set(call)
    try:
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
    sender: str = "consumer",
) -> Verdict:
    from idempotency_django.consumers import failures as table

    try:
        failures, age = (
            (attempt, 0.0) if attempt is not None else table.count(using, tenant, key, error)
        )
    except UNAVAILABLE_ERRORS as away:
        return _unavailable(using, rules, away)
    if not rules.exhausted(failures, age):
        logger.info("consumer: handler failed (%d so far): %r", failures, error)
        return Verdict(RETRY, rules.delay(failures), "failed", error=error, failures=failures)
    return _give_up(using, tenant, key, attempt, error, failures, call, sender)


def _give_up(
    using: str,
    tenant: str,
    key: str,
    attempt: int | None,
    error: Exception,
    failures: int,
    call: IdempotentCall | None,
    sender: str,
) -> Verdict:
    if attempt is None:
        from idempotency_django.consumers import failures as table

        try:
            table.forget(using, tenant, key)  # sent again later, it starts afresh
        except UNAVAILABLE_ERRORS:
            logger.warning("consumer: could not clear the failure count of a dead letter")
    digest = signals.key_digest(tenant, key)
    uncertain = call is not None and call.derived
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
    if isinstance(error, UNAVAILABLE_ERRORS):
        return False
    using = database or default_alias()
    stored = namespaced(scope, key)
    rules = GiveUp(max_attempts=max_attempts)
    verdict = _failed(using, tenant, stored, rules, None, error, None, sender="task")
    return verdict.action == DEAD_LETTER


def task_succeeded(*, scope: str, key: str, tenant: str, database: str | None) -> None:
    """Forget a task's failures, in its transaction (``max_attempts=``)."""
    from idempotency_django.consumers import failures

    failures.forget(database or default_alias(), tenant, namespaced(scope, key))


__all__ = ["aconsume", "consume", "current_call", "task_failed", "task_succeeded"]
