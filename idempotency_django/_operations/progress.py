"""Progress of the long commands (``purge_idempotency``, ``reseal_idempotency``,
``relay_outbox``): batches, rows, rate and time left.

Django's own output style, no bar library: one line redrawn with ``\\r`` through the
command's ``self.stdout`` while it is a terminal at ``-v 1``; a line per batch at
``-v 2`` and up (terminal or not); nothing at ``-v 0``, nor off a terminal at ``-v 1``,
where the command's one summary line stays the only output (cron, CI). A bar library
(tqdm, rich) would draw a finer bar, at the price of a dependency, or an extra,
for one line of text.

Totals are estimates, never a full count of a big table: PostgreSQL's planner
estimate for the command's own selection (``EXPLAIN``, from the statistics
``ANALYZE`` keeps; no row is read), a count bounded at :data:`BOUNDED_COUNT` rows
elsewhere. Each is read only when progress is shown.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final

from django.core.management.base import CommandError, OutputWrapper
from django.db import connections
from django.db.models import QuerySet

#: Past this many rows a non-PostgreSQL total is unknown (the line then shows none).
BOUNDED_COUNT: Final = 100_000
#: Exit status of an interrupted command: 128 + SIGINT, as a shell reports Ctrl-C.
INTERRUPTED: Final = 130


class Progress:
    """Counts batches and rows as the command reports them, and shows them as told."""

    def __init__(
        self,
        out: OutputWrapper,
        what: str,
        verbosity: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.out, self.what, self.verbosity, self.clock = out, what, verbosity, clock
        self.live = verbosity == 1 and out.isatty()  # one line redrawn in place
        self.total: int | None = None
        self.batches = self.rows = self.drawn = 0
        self.started = clock()

    @property
    def shown(self) -> bool:
        """Whether anything is shown per batch (and so whether a total is worth reading)."""
        return self.live or self.verbosity >= 2

    def batch(self, rows: int) -> None:
        """One batch done (committed): ``rows`` rows."""
        self.batches += 1
        self.rows += rows
        if self.live:
            line = self.line()
            self.out.write("\r" + line.ljust(self.drawn), ending="")
            self.out.flush()
            self.drawn = len(line)
        elif self.verbosity >= 2:
            self.out.write(self.line())

    def line(self) -> str:
        """``purge on 'default': batch 3, 3,000 of ~9,000 rows, 1,500 rows/s, ~4 s left``."""
        seconds = self.clock() - self.started
        rate = self.rows / seconds if seconds > 0 else 0.0
        text = f"{self.what}: batch {self.batches:,}, {self.rows:,}"
        if self.total is not None and self.total >= self.rows:
            text += f" of ~{self.total:,}"
        text += f" rows, {rate:,.0f} rows/s"
        if self.total is not None and rate > 0 and self.total > self.rows:
            text += f", ~{_duration((self.total - self.rows) / rate)} left"
        return text

    def end(self) -> None:
        """Leave the redrawn line where it is: what follows starts on a line of its own."""
        if self.drawn:
            self.out.write("")
            self.drawn = 0

    def interrupted(self) -> str:
        return (
            f"Interrupted: {self.what} stopped at a batch boundary after {self.batches:,} "
            f"batch(es), {self.rows:,} rows done, each batch committed whole; the batch "
            "under way was rolled back. Run the command again to finish."
        )


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


@contextmanager
def watched(
    out: OutputWrapper, what: str, verbosity: int, total: Callable[[], int | None]
) -> Iterator[Progress]:
    """A :class:`Progress` for one run of a command's loop; Ctrl-C (``KeyboardInterrupt``)
    in it ends the command with a :class:`CommandError` saying what was done (exit 130)."""
    progress = Progress(out, what, verbosity)
    if progress.shown:
        progress.total = total()
    try:
        yield progress
    except KeyboardInterrupt:
        progress.end()
        raise CommandError(progress.interrupted(), returncode=INTERRUPTED) from None
    progress.end()


def estimate(using: str, query: str, params: Sequence[Any]) -> int | None:
    """About how many rows ``query`` (a ``SELECT`` without ``LIMIT``) returns, never
    counting a big table whole; ``None`` when unknown (past :data:`BOUNDED_COUNT`)."""
    conn = connections[using]
    with conn.cursor() as cursor:
        if conn.vendor == "postgresql":
            cursor.execute(f"EXPLAIN (FORMAT JSON) {query}", params)
            plan = cursor.fetchone()[0]
            return int(plan[0]["Plan"]["Plan Rows"])
        cursor.execute(
            f"SELECT COUNT(*) FROM ({query} LIMIT %s) bounded", [*params, BOUNDED_COUNT + 1]
        )
        found = int(cursor.fetchone()[0])
    return found if found <= BOUNDED_COUNT else None


def estimate_queryset(rows: QuerySet[Any]) -> int | None:
    """:func:`estimate` for a queryset, on its own database."""
    query, params = rows.values("pk").query.get_compiler(rows.db).as_sql()
    return estimate(rows.db, query, params)
