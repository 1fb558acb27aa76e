"""The cost of ``enqueue()`` inside a protected view: statements and added latency.

The same protected view with and without one ``enqueue()``, interleaved, in
process. The outbox's fast path publishes after the commit, inside the request,
to a Redis broker (``BENCH_CELERY_URL``, default db 12) on a private queue that
is deleted afterwards: its publish is part of the added latency.
"""

from __future__ import annotations

import os
import uuid

from celery import Celery

from bench.inprocess import Requests, _expect, count_sql, statements
from bench.measure import Series, per_round, sweep, timed
from bench.report import Report, Row

SECTION = "outbox: enqueue() inside a protected view (in-process, fast path publishing to Redis)"
BROKER = os.environ.get("BENCH_CELERY_URL", "redis://127.0.0.1:6379/12")
QUEUE = f"idem_bench_outbox_{uuid.uuid4().hex[:8]}"


def measure(report: Report, rounds: int, per_round_count: int) -> None:
    """Add the outbox's figures to ``report``."""
    app = Celery("idem_bench", broker=BROKER, set_as_current=False)
    app.conf.update(task_default_queue=QUEUE, broker_connection_timeout=2)
    app.set_current()
    requests = Requests()
    try:
        series = sweep(
            {
                "protected": lambda: _post(requests, "/protected/"),
                "outbox": lambda: _post(requests, "/outbox/"),
            },
            rounds,
            per_round_count,
        )
        counts = {path: _statements(requests, path) for path in ("/protected/", "/outbox/")}
    finally:
        with app.connection_for_write() as conn:
            conn.default_channel.queue_delete(QUEUE)  # type: ignore[attr-defined]
    _report(report, series, counts)


def _statements(requests: Requests, path: str) -> int:
    return count_sql(statements(lambda: _post(requests, path)))


def _post(requests: Requests, path: str) -> float:
    return timed(lambda: _expect(requests.post(path, str(uuid.uuid4())), replayed=False))


def _report(report: Report, s: dict[str, Series], counts: dict[str, int]) -> None:
    added = per_round(lambda a, b: a - b, s["outbox"], s["protected"])
    report.timing(SECTION, "outbox_protected", "protected view", s["protected"])
    report.timing(SECTION, "outbox_enqueue", "protected view + enqueue()", s["outbox"])
    report.timing(SECTION, "outbox_added", "added latency (enqueue + fast path)", added)
    extra = counts["/outbox/"] - counts["/protected/"]
    label = "statements added (INSERT in the view; SELECT FOR UPDATE + UPDATE after commit)"
    report.add(SECTION, Row("outbox_statements_added", label, extra, ""))
