"""``manage.py reseal_idempotency``: stored answers re-sealed under the newest key.

Run after putting a new key first in ``IDEMPOTENCY_ENCRYPTION_KEYS`` (the old one
still listed), then drop the old key: every finished entry a replay opens is then
sealed under the newest. Run it once after upgrading from 0.5 or 0.4 too, with
``IDEMPOTENCY_OPEN_LEGACY_ROWS`` on: 0.5's seal (bound to the identity row alone) and
0.4's (its default key rooted in the database itself, its status and reason outside
the seal) are then gone from the table, and from every backup taken afterwards.

It opens exactly what a replay opens (``seal.believed``): 0.5's, 0.4's and 0.3's rows
only under ``IDEMPOTENCY_OPEN_LEGACY_ROWS`` (run it in that window to make them
current, replayable once the setting is off again), and a row a replay refuses is
left as it is, never made openable. Each batch is its own short transaction, and each
write is fenced on the entry's owner token, so that an entry taken over or purged
meanwhile is left as it is. ``--new-key`` prints a fresh key for the setting.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction

from idempotency_django._operations import progress
from idempotency_django._storage import seal
from idempotency_django.databases import chosen_or_every
from idempotency_django.management.arguments import check_batch_and_database
from idempotency_django.models import IdempotencyEntry

DEFAULT_BATCH_SIZE = 500


@dataclass
class Resealed:
    resealed: int = 0
    current: int = 0
    unreadable: int = 0


class Command(BaseCommand):
    help = (
        "Re-seal every stored idempotency answer under the newest key of "
        "IDEMPOTENCY_ENCRYPTION_KEYS (what a replay opens, and only that), in short batches."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--new-key", action="store_true", help="Print a new key for the setting and exit."
        )
        parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, metavar="N")
        parser.add_argument(
            "--database",
            metavar="ALIAS",
            help="Database alias holding the entries (default: every alias that holds them).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["new_key"]:
            self.stdout.write(seal.new_key())
            return
        batch_size, database = options["batch_size"], options["database"]
        check_batch_and_database(batch_size, database)
        for alias in chosen_or_every(database):
            # The whole table's estimate: the few entries in flight are skipped, not counted.
            entries = IdempotencyEntry.objects.using(alias)
            total = functools.partial(progress.estimate_queryset, entries)
            what = f"reseal of {alias!r}"
            with progress.watched(self.stdout, what, options["verbosity"], total) as shown:
                done = reseal(alias, batch_size, on_batch=shown.batch)
            self.stdout.write(
                f"{alias!r}: {done.resealed} resealed, {done.current} already under the newest "
                f"key, {done.unreadable} unreadable (left until they expire)."
            )


def reseal(
    using: str,
    batch_size: int = DEFAULT_BATCH_SIZE,
    on_batch: Callable[[int], None] = lambda rows: None,
) -> Resealed:
    """Re-seal the finished entries on ``using``; counts what was done.

    ``on_batch(rows)`` is called after each batch's transaction has committed.
    """
    done, after = Resealed(), 0
    finished = IdempotencyEntry.objects.using(using).exclude(
        status=IdempotencyEntry.Status.IN_PROGRESS
    )
    while True:
        batch = list(finished.filter(pk__gt=after).order_by("pk")[:batch_size])
        if not batch:
            return done
        with transaction.atomic(using=using):
            for entry in batch:
                _reseal_one(using, entry, done)
        on_batch(len(batch))
        after = batch[-1].pk


def _reseal_one(using: str, entry: IdempotencyEntry, done: Resealed) -> None:
    found = seal.from_row(
        entry.response_status, entry.response_reason, entry.response_headers, entry.response_body
    )
    try:
        blob = seal.resealed(using, entry.tenant, entry.key, found)
    except seal.Unreadable:
        done.unreadable += 1
        return
    if blob is None:
        done.current += 1
        return
    rows = IdempotencyEntry.objects.using(using).filter(pk=entry.pk, owner=entry.owner)
    done.resealed += rows.update(response_headers=seal.ROW_MARKER, response_body=blob)
