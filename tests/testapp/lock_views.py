"""One path, every protocol variant: the lock-protocol tests pick theirs with headers.

The fingerprint covers the method, path, query and body, not these headers, so
requests under different protocols, waits and leases share one key and one
fingerprint: the rolling deploy that switches protocol, in one process.
``X-Protocol`` (``lock`` | ``lease``), ``X-Wait`` (seconds), ``X-Lease`` (seconds),
``X-Work`` (seconds of busy work after the write).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from django.db import connection
from django.http import HttpRequest, HttpResponse

from idempotency_django import idempotent
from tests.testapp.models import Charge
from tests.testapp.views import _body, make_charge

WAITS = (0.0, 0.3, 5.0)
LEASES = (None, 1.0, 3.0)


def charge_and_hold(request: HttpRequest) -> HttpResponse:
    """``make_charge`` (``sleep`` idles after the write), plus two ways to hold on.

    ``lock_row``: first wait for a row lock on that charge (a plain transaction
    of the test holds it). ``work`` (or the ``X-Work`` header, which the
    fingerprint ignores): after the write, keep the transaction busy for that
    long (statements, never idle), as real business work does.
    """
    data = _body(request)
    if data.get("lock_row"):
        Charge.objects.select_for_update().get(pk=int(data["lock_row"]))
    response = make_charge(request)
    work = request.headers.get("X-Work") or data.get("work")
    if work:
        keep_working(float(work))
    return response


def keep_working(seconds: float) -> None:
    until = time.monotonic() + seconds
    while (remaining := until - time.monotonic()) > 0:
        time.sleep(min(0.05, remaining))
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")


View = Callable[[HttpRequest], HttpResponse]
VARIANTS: dict[tuple[str, float, float | None], View] = {
    (protocol, wait, lease): idempotent(protocol=protocol, wait=wait, lease=lease)(charge_and_hold)
    for protocol in ("lock", "lease")
    for wait in WAITS
    for lease in LEASES
}


def by_headers(request: HttpRequest) -> HttpResponse:
    lease = request.headers.get("X-Lease")
    variant = (
        request.headers.get("X-Protocol", "lock"),
        float(request.headers.get("X-Wait", 0)),
        None if lease is None else float(lease),
    )
    return VARIANTS[variant](request)
