"""``python manage.py pay_through_flaky_proxy``: the Python client against the sample itself.

Start the sample first (``make run``). The command puts a proxy that loses the
first answer between the client and the sample, and pays once: the client's
first attempt commits the charge but its answer is lost; the retry carries the
same Idempotency-Key and gets the stored answer replayed. One charge.

``--url`` may name another server and endpoint (``http://127.0.0.1:9000/api/orders/``:
its path is the endpoint; none, the sample's ``/charges/``), ``--json`` the body to
send and ``--proxy-port`` the port the proxy listens on: the same trial for one's
own protected view. The proxy speaks plain HTTP to the server (no TLS).
"""

from __future__ import annotations

import json
import uuid
from typing import Any
from urllib.parse import urlsplit

import httpx
from django.core.management.base import BaseCommand, CommandError, CommandParser

from idempotency_django.client import IdempotentTransport, RetriesExhausted, RetryPolicy
from sample_project.payments.flaky_proxy import FlakyProxy
from sample_project.payments.models import Charge

SAMPLE_PATH = "/charges/"


class Command(BaseCommand):
    help = "Pay once through a proxy that loses answers; the client retries with one key."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--url",
            default="http://127.0.0.1:8000",
            help=f"the server, and the endpoint as its path (default: the sample's {SAMPLE_PATH})",
        )
        parser.add_argument("--json", help="the JSON body to POST (default: a sample charge)")
        parser.add_argument(
            "--proxy-port", type=int, default=0, help="the proxy's own port (default: any free)"
        )
        parser.add_argument("--lose", type=int, default=1, help="answers the proxy loses")
        parser.add_argument("--attempts", type=int, default=3, help="the client's attempts")
        parser.add_argument("--amount", type=int, default=1000)

    def handle(self, *args: Any, **options: Any) -> None:
        target = urlsplit(options["url"])
        endpoint = target.path if target.path not in ("", "/") else SAMPLE_PATH
        if target.query:
            endpoint += f"?{target.query}"
        description = f"flaky-proxy-{uuid.uuid4()}"
        body = _body(options["json"], options["amount"], description)
        proxy = FlakyProxy(
            target.hostname or "127.0.0.1",
            target.port or 80,
            lose=options["lose"],
            listen=options["proxy_port"],
        )
        self.stdout.write(f"proxy:    {proxy.url} -> {target.scheme}://{target.netloc}{endpoint}")
        policy = RetryPolicy(max_attempts=options["attempts"])
        try:
            with httpx.Client(
                base_url=proxy.url, transport=IdempotentTransport(policy=policy), timeout=30
            ) as client:
                response = client.post(endpoint, json=body)
        except RetriesExhausted as error:
            # More answers lost than attempts allowed: the charge may exist. The key says.
            raise CommandError(f"{error}\nSend it again with this key: one charge.") from error
        finally:
            proxy.close()
        self.stdout.write(f"key:      {response.extensions['idempotency_key']}")
        self.stdout.write(f"attempts: {response.extensions['idempotency_attempts']}")
        self.stdout.write(f"answer:   {response.status_code} {response.text}")
        replayed = response.headers.get("Idempotent-Replayed") == "true"
        self.stdout.write(f"replayed: {replayed}")
        if endpoint == SAMPLE_PATH and options["json"] is None:
            # The sample's own database: the charges the server committed for this payment.
            charges = Charge.objects.filter(description=description).count()
            self.stdout.write(f"charges:  {charges}")


def _body(given: str | None, amount: int, description: str) -> Any:
    if given is None:
        return {"amount": amount, "currency": "eur", "description": description}
    try:
        return json.loads(given)
    except ValueError as error:
        raise CommandError(f"--json is not JSON: {error}") from error
