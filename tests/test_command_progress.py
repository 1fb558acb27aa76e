"""The long commands show progress on a terminal, one summary line off it, and stop
at a batch boundary on Ctrl-C (``purge_idempotency``, ``reseal_idempotency``,
``relay_outbox``; :mod:`idempotency_django._operations.progress`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.core.management.base import OutputWrapper
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from idempotency_django import purge
from idempotency_django._operations import progress
from idempotency_django._storage import seal
from idempotency_django.management.commands import reseal_idempotency
from idempotency_django.models import IdempotencyEntry
from idempotency_django.outbox import delivery
from idempotency_django.outbox.models import OutboxMessage
from tests.factories import IdempotencyEntryFactory

pytestmark = pytest.mark.django_db


class Terminal(StringIO):
    """A stdout that says it is a terminal, as ``sys.stdout`` in an interactive shell does."""

    def isatty(self) -> bool:
        return True


def run(command: str, *args: str, out: StringIO | None = None) -> str:
    out = StringIO() if out is None else out
    call_command(command, *args, stdout=out)
    return out.getvalue()


def expired(count: int) -> None:
    IdempotencyEntryFactory.create_batch(count, expired=True)


def plain(count: int) -> None:
    """Finished entries stored in the clear (0.3's rows): each one reseal seals in the
    upgrade window (``IDEMPOTENCY_OPEN_LEGACY_ROWS``, on for this module)."""
    IdempotencyEntryFactory.create_batch(count, response_body=b"0.3 plain")


@pytest.fixture(autouse=True)
def upgrade_window(settings: Any) -> None:
    settings.IDEMPOTENCY_OPEN_LEGACY_ROWS = True


def pending(count: int) -> None:
    due = timezone.now() - timedelta(seconds=60)
    for i in range(count):
        OutboxMessage.objects.create(key=f"k{i}", task="tests.receipt", next_attempt_at=due)


@pytest.fixture
def published(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    sent: list[str] = []
    monkeypatch.setattr(delivery, "publish", lambda row, timeout=None: sent.append(row.key))
    return sent


def sealed() -> int:
    rows = IdempotencyEntry.objects.values_list("response_headers", flat=True)
    return sum(seal.is_sealed_row(headers) for headers in rows)


def unsent() -> int:
    return OutboxMessage.objects.filter(sent_at=None).count()


# Each long command: (arguments, rows to make, rows left undone afterwards, its summary).
COMMANDS: dict[str, tuple[tuple[str, ...], Callable[[int], None], Callable[[], int], str]] = {
    "purge_idempotency": (
        (),
        expired,
        lambda: IdempotencyEntry.objects.count(),
        "Deleted 5 expired and 0 abandoned in-progress entries from 'default'.",
    ),
    "reseal_idempotency": (
        (),
        plain,
        lambda: IdempotencyEntry.objects.count() - sealed(),
        "'default': 5 resealed, 0 already under the newest key, 0 unreadable "
        "(left until they expire).",
    ),
    "relay_outbox": (("--now",), pending, unsent, "outbox: 5 sent, 0 failed"),
}


@pytest.fixture(params=sorted(COMMANDS))
def command(request: pytest.FixtureRequest, published: list[str]) -> str:
    name: str = request.param
    COMMANDS[name][1](5)
    return name


def test_on_a_terminal_the_line_is_redrawn_per_batch_then_the_summary(command: str) -> None:
    args, _, left, summary = COMMANDS[command]
    shown = run(command, *args, "--batch-size=2", out=Terminal())
    drawn, _, after = shown.rpartition("\n")
    assert after == ""
    *redrawn, last = drawn.split("\n")
    frames = "".join(redrawn).split("\r")[1:]
    assert len(frames) >= 3  # a frame per batch: 2, 2, 1 (and purge's empty last ones)
    assert re.fullmatch(
        r"\w+ of 'default': batch 3, 5( of ~\d+)? rows, [\d,]+ rows/s.*", frames[2].rstrip()
    )
    assert last == summary
    assert left() == 0


def test_off_a_terminal_only_the_summary_line_and_no_estimate(command: str) -> None:
    args, _, left, summary = COMMANDS[command]
    with CaptureQueriesContext(connection) as queries:
        assert run(command, *args, "--batch-size=2") == summary + "\n"
    assert not [q for q in queries if "COUNT(" in q["sql"] or "EXPLAIN" in q["sql"]]
    assert left() == 0


def test_at_verbosity_2_a_line_per_batch_terminal_or_not(command: str) -> None:
    args, _, _, summary = COMMANDS[command]
    lines = run(command, *args, "--batch-size=2", "-v", "2").splitlines()
    assert "\r" not in "".join(lines)
    assert lines[0].startswith(f"{command.split('_')[0]} of 'default': batch 1, 2 ")
    assert lines[-1] == summary


@pytest.mark.parametrize("name", ["purge_idempotency", "relay_outbox"])
def test_verbosity_0_is_silent_on_a_terminal(name: str, published: list[str]) -> None:
    args, make, left, _ = COMMANDS[name]
    make(3)
    assert run(name, *args, "-v", "0", out=Terminal()) == ""
    assert left() == 0


@pytest.fixture
def interrupt_after(monkeypatch: pytest.MonkeyPatch) -> Callable[[int], None]:
    """Ctrl-C right after batch k has committed (as the progress line shows it)."""

    def arm(k: int) -> None:
        real = progress.Progress.batch

        def batch(self: progress.Progress, rows: int) -> None:
            real(self, rows)
            if self.batches == k:
                raise KeyboardInterrupt

        monkeypatch.setattr(progress.Progress, "batch", batch)

    return arm


def test_ctrl_c_stops_at_a_batch_boundary_and_says_what_was_done(
    command: str, interrupt_after: Callable[[int], None]
) -> None:
    args, _, left, _ = COMMANDS[command]
    interrupt_after(2)
    out = Terminal()
    with pytest.raises(CommandError) as raised:
        run(command, *args, "--batch-size=2", out=out)
    assert raised.value.returncode == progress.INTERRUPTED == 130
    assert "stopped at a batch boundary after 2 batch(es), 4 rows done" in str(raised.value)
    assert out.getvalue().endswith("\n")  # the prompt comes back on a line of its own
    assert left() == 1


@pytest.fixture
def interrupted_in_batch(monkeypatch: pytest.MonkeyPatch) -> Callable[[str, int], None]:
    """Ctrl-C inside a batch, once ``n`` rows of the run have been handled."""

    def arm(command: str, n: int) -> None:
        owner, name = (
            (reseal_idempotency, "_reseal_one")
            if command == "reseal_idempotency"
            else (delivery, "publish")
        )
        real, calls = getattr(owner, name), []

        def handled(*args: Any, **kwargs: Any) -> Any:
            calls.append(1)
            if len(calls) == n:
                raise KeyboardInterrupt
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, handled)

    return arm


@pytest.mark.parametrize("name", ["reseal_idempotency", "relay_outbox"])
def test_ctrl_c_inside_a_batch_rolls_that_batch_back_whole(
    name: str, published: list[str], interrupted_in_batch: Callable[[str, int], None]
) -> None:
    args, make, left, _ = COMMANDS[name]
    make(5)
    interrupted_in_batch(name, 4)  # the second row of the second batch
    with pytest.raises(CommandError, match=r"after 1 batch\(es\), 2 rows done"):
        run(name, *args, "--batch-size=2")
    assert left() == 3  # the first batch's two rows done; none of the second's


def test_the_line_shows_the_rate_and_the_time_left() -> None:
    ticks = iter([0.0, 2.0, 4.0, 5.0])
    shown = progress.Progress(OutputWrapper(StringIO()), "purge", 2, clock=lambda: next(ticks))
    shown.total = 10_000
    shown.batch(1000)
    assert shown.line() == "purge: batch 1, 1,000 of ~10,000 rows, 250 rows/s, ~36 s left"
    shown.total = 500  # an estimate below what was done: no total, no time left
    assert shown.line() == "purge: batch 1, 1,000 rows, 200 rows/s"


@pytest.mark.parametrize(("seconds", "shown"), [(30, "30 s"), (600, "10 min"), (9000, "2.5 h")])
def test_time_left_reads_in_a_fitting_unit(seconds: float, shown: str) -> None:
    assert progress._duration(seconds) == shown


def test_a_first_batch_at_once_has_no_rate_and_no_time_left() -> None:
    shown = progress.Progress(OutputWrapper(StringIO()), "relay", 1, clock=lambda: 1.0)
    shown.total = 3
    shown.batch(1)
    assert shown.line() == "relay: batch 1, 1 of ~3 rows, 0 rows/s"


def test_off_postgresql_the_total_is_a_bounded_count(monkeypatch: pytest.MonkeyPatch) -> None:
    if connection.vendor == "postgresql":
        pytest.skip("PostgreSQL's total is the planner's estimate (the test below)")
    expired(3)
    assert purge.estimate() == 3
    monkeypatch.setattr(progress, "BOUNDED_COUNT", 2)
    assert purge.estimate() is None  # past the bound: unknown, never counted whole


@pytest.mark.requires_postgres
def test_on_postgresql_the_total_is_the_planners_estimate() -> None:
    expired(3)
    with CaptureQueriesContext(connection) as queries:
        found = purge.estimate()
    assert isinstance(found, int)
    assert all(q["sql"].startswith("EXPLAIN") for q in queries)


def test_relay_once_is_one_pass_and_refuses_every_beside_it(published: list[str]) -> None:
    pending(3)
    assert run("relay_outbox", "--once", "--now") == "outbox: 3 sent, 0 failed\n"
    assert len(published) == 3
    with pytest.raises(CommandError, match="not allowed with argument"):
        call_command("relay_outbox", "--once", "--every", "5")
