"""A delivery's count, kept by the claim (:class:`~._protocol.execution.Guard`).

Only the delivery that holds the message's claim counts a run, and it notes its
failure (and gives the message up) while it still holds it: a redelivery that waited
for the key, or was told to retry, counts nothing and never reads a failure before
it is noted, whichever protocol decided who runs (issue 53, item 5).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from django.db import DatabaseError, connections

from idempotency_django.consumers import classify
from idempotency_django.consumers.policy import GiveUp
from idempotency_django.exceptions import RequestInProgress

logger = logging.getLogger("idempotency_django.consumers")


class GivenUpMeanwhile(Exception):
    """The message was given up on while this delivery was on its way (it waited for the
    run that failed its last time, or reached the claim just after it): not run."""

    def __init__(self, failures: int) -> None:
        super().__init__(f"given up on after {failures} failure(s) while this delivery waited")
        self.failures = failures


class RunsLost(Exception):
    """A message's last runs never finished: each took its process down (SIGKILL, the
    OOM killer, a segfault). It is dead-lettered without running again."""


@dataclass(frozen=True)
class Noted:
    """A run's failure, counted: the failures so far; ``exhausted``: the message given up."""

    failures: int
    exhausted: bool


@dataclass
class RunCount:
    """The :class:`~._protocol.execution.Guard` of one :func:`~.core.consume` delivery.

    ``own``: the claim's transaction is the delivery's own (else a caller's, where
    nothing is durable: under ``"lock"`` the count goes with the body's rollback and
    its failure is counted after it, ``durable`` false).
    """

    using: str
    tenant: str
    key: str
    rules: GiveUp
    own: bool
    dead_before: datetime | None  # the message's dead letter as the delivery arrived
    runs: int = 0  # this run, with the runs before it that failed or never finished
    durable: bool = True
    noted: Noted | None = None

    def claimed(self, inside: bool) -> None:
        from idempotency_django.consumers import failures as table  # the model: app ready

        self.durable = self.own or not inside
        with table.apart(self.using, inside and self.own):
            self.runs = table.started(self.using, self.tenant, self.key, self.dead_before)

    def check(self) -> None:
        """In the body, before the handler: raise :class:`RunsLost` past ``max_attempts``."""
        if self.runs > self.rules.max_attempts:
            raise RunsLost(
                f"its last {self.runs - 1} run(s) never finished: the handler takes its "
                "process down (killed, out of memory, crashed)"
            )

    def failed(self, error: BaseException) -> None:
        """Note the failure before the rollback frees the key (on a connection of its own,
        where rows lock one by one); elsewhere, or in a caller's transaction, after it."""
        from idempotency_django.consumers import failures as table

        if not (self.own and _rows_lock(self.using)) or not isinstance(error, Exception):
            return  # a BaseException: the process going, its count left as a lost run's
        if isinstance(error, RequestInProgress) or classify.store_away(error, self.using):
            return  # another holds the key, or the store is away: never a failure
        try:
            with table.apart(self.using):
                self.noted = self._note(error)
        except DatabaseError as away:  # counted after the rollback instead, if it can be
            logger.warning("consumer: could not note a failure while holding it (%r)", away)

    def given_up_since(self) -> int | None:
        """After its store went away: the failures of a dead letter made since this run
        began (it lost its claim, and another delivery gave the message up), if any."""
        from idempotency_django.consumers import failures as table

        if not (self.runs and self.durable):
            return None
        return table.given_up_since(self.using, self.tenant, self.key, self.dead_before)

    def tally(self, error: Exception) -> Noted:
        """The failures so far, this run's included (counted when it started, unless a
        caller's transaction took that back); raises :class:`GivenUpMeanwhile` if the run
        lost its claim and another delivery gave the message up."""
        from idempotency_django.consumers import failures as table

        if isinstance(error, RunsLost):
            return Noted(self.runs - 1, exhausted=True)
        add = 0 if self.runs and self.durable else 1
        failures, age = table.count(self.using, self.tenant, self.key, error, add=add)
        return Noted(failures, self.rules.exhausted(failures, age))

    def _note(self, error: Exception) -> Noted:
        from idempotency_django.consumers import failures as table

        try:
            noted = self.tally(error)
        except GivenUpMeanwhile as given:  # a dead letter already
            return Noted(given.failures, exhausted=True)
        if noted.exhausted:
            table.gave_up(self.using, self.tenant, self.key, noted.failures, error)
        return noted


def _rows_lock(using: str) -> bool:
    # SQLite's one writer is the run's own open transaction: a second connection would
    # wait for it (and time out) instead of writing beside it.
    return bool(connections[using].features.has_select_for_update)


__all__ = ["GivenUpMeanwhile", "Noted", "RunCount", "RunsLost"]
