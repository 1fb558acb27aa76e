"""``manage.py purge_idempotency``: a thin shell over :func:`idempotency_django.purge.purge`."""

from __future__ import annotations

import functools
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from idempotency_django._operations import progress
from idempotency_django.databases import chosen_or_every
from idempotency_django.management.arguments import check_batch_and_database
from idempotency_django.purge import DEFAULT_BATCH_SIZE, PurgeResult, estimate, purge


class Command(BaseCommand):
    help = (
        "Delete idempotency entries past their expiry and reclaim in-progress ones whose "
        "lease has passed and which no live transaction holds, in short batches."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--dry-run", action="store_true", help="Count what would go; change nothing."
        )
        parser.add_argument(
            "--batch-size",
            type=int,
            default=DEFAULT_BATCH_SIZE,
            metavar="N",
            help=f"Rows per batch, each its own short transaction (default {DEFAULT_BATCH_SIZE}).",
        )
        parser.add_argument(
            "--database",
            metavar="ALIAS",
            help="Database alias holding the entries (default: every alias that holds them).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        batch_size, database = options["batch_size"], options["database"]
        check_batch_and_database(batch_size, database)
        verbosity = options["verbosity"]
        for alias in chosen_or_every(database):
            total = functools.partial(estimate, alias)
            with progress.watched(self.stdout, f"purge of {alias!r}", verbosity, total) as shown:
                result = purge(
                    using=alias,
                    batch_size=batch_size,
                    dry_run=options["dry_run"],
                    on_batch=shown.batch,
                )
            if verbosity > 0:  # -v 0: silent on success, for cron
                self.stdout.write(summary(result, alias))


def summary(result: PurgeResult, database: str) -> str:
    """``Deleted 12 expired and 3 abandoned in-progress entries from 'default'.``"""
    verb = "Dry run: would delete" if result.dry_run else "Deleted"
    return (
        f"{verb} {result.expired} expired and {result.abandoned} abandoned in-progress "
        f"entries from {database!r}."
    )
