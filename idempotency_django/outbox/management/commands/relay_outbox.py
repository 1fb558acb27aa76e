"""``manage.py relay_outbox``: publish the outbox rows the on_commit fast path missed."""

from __future__ import annotations

import functools
import math
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from idempotency_django._operations import progress
from idempotency_django.databases import chosen_or_every
from idempotency_django.management.arguments import check_batch_and_database
from idempotency_django.outbox import delivery
from idempotency_django.outbox.models import OutboxMessage


class Command(BaseCommand):
    help = (
        "Publish pending outbox rows (after a crash or a broker outage); each row once per attempt."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--batch-size", type=int, default=delivery.DEFAULT_BATCH_SIZE)
        parser.add_argument(
            "--database", default=None, help="default: every alias holding outbox rows"
        )
        parser.add_argument(
            "--now",
            action="store_true",
            help="publish every pending row now, whatever its next attempt time",
        )
        passes = parser.add_mutually_exclusive_group()
        passes.add_argument(
            "--once",
            action="store_true",
            help="one pass over every pending row, then exit (the default; with a progress "
            "line on a terminal while it catches up)",
        )
        passes.add_argument(
            "--every", type=float, default=None, help="keep running, one pass every N seconds"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        check_batch_and_database(options["batch_size"], options["database"])
        every = options["every"]
        if every is not None and not (math.isfinite(every) and every > 0):
            raise CommandError(f"--every takes a positive number of seconds, got {every}.")
        while True:
            aliases = chosen_or_every(options["database"], OutboxMessage)
            for alias in aliases:
                counts = self._relay(alias, options)
                where = f" ({alias})" if len(aliases) > 1 else ""
                if options["verbosity"] > 0:  # -v 0: silent on success, as the purge is
                    self.stdout.write(
                        f"outbox{where}: {counts['sent']} sent, {counts['failed']} failed"
                    )
            if options["every"] is None:
                return
            time.sleep(options["every"])

    def _relay(self, alias: str, options: dict[str, Any]) -> dict[str, int]:
        now = options["now"]
        total = functools.partial(progress.estimate_queryset, delivery.due(alias, now))
        what = f"relay of {alias!r}"
        with progress.watched(self.stdout, what, options["verbosity"], total) as shown:
            return delivery.relay(
                using=alias,
                batch_size=options["batch_size"],
                ignore_schedule=now,
                on_batch=shown.batch,
            )
