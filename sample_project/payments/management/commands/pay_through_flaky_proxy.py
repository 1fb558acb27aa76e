"""``python manage.py pay_through_flaky_proxy``: the Python client against the sample itself.

Start the sample first (``make run``). The command puts a proxy that loses the
first answer between the client and the sample, and pays once: the client's
first attempt commits the charge but its answer is lost; the retry carries the
same Idempotency-Key and gets the stored answer replayed. One charge.
"""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import urlsplit

import httpx
from django.core.management.base import BaseCommand, CommandError, CommandParser

from idempotency_django.client import IdempotentTransport, RetriesExhausted, RetryPolicy
from sample_project.payments.flaky_proxy import FlakyProxy
from sample_project.payments.models import Charge


class Command(BaseCommand):
    help = "Pay once through a proxy that loses answers; the client retries with one key."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--url", default="http://127.0.0.1:8000", help="the running sample")
        parser.add_argument("--lose", type=int, default=1, help="answers the proxy loses")
        parser.add_argument("--attempts", type=int, default=3, help="the client's attempts")
        parser.add_argument("--amount", type=int, default=1000)

    def handle(
        self, *args: Any, url: str, lose: int, attempts: int, amount: int, **options: Any
    ) -> None:
        target = urlsplit(url)
        proxy = FlakyProxy(target.hostname or "127.0.0.1", target.port or 80, lose=lose)
        description = f"flaky-proxy-{uuid.uuid4()}"
        transport = IdempotentTransport(policy=RetryPolicy(max_attempts=attempts))
        try:
            with httpx.Client(base_url=proxy.url, transport=transport, timeout=30) as client:
                response = client.post(
                    "/charges/",
                    json={"amount": amount, "currency": "eur", "description": description},
                )
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
        # The sample's own database: the charges the server committed for this payment.
        charges = Charge.objects.filter(description=description).count()
        self.stdout.write(f"charges:  {charges}")
