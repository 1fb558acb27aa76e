"""The arguments both commands take, checked alike: a bad one is a ``CommandError``."""

from __future__ import annotations

from django.core.management.base import CommandError
from django.db import connections


def check_batch_and_database(batch_size: int, database: str | None) -> None:
    if batch_size < 1:
        raise CommandError(f"--batch-size must be a positive integer, got {batch_size}.")
    check_database(database)


def check_database(database: str | None) -> None:
    if database is not None and database not in connections:
        raise CommandError(
            f"--database {database!r} is not an alias in DATABASES "
            f"(choose from: {', '.join(connections)})."
        )
