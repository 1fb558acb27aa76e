"""Printed by `make run` before the server starts: where to click, and a replay by hand.

``python sample_project/hint.py [PORT]``: creates the demo user (demo/demo) and its
API token if missing, so the DRF line below carries a token that works.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HINT = """
Serving the sample project on {base}/  (admin and API user: demo / demo)

  Checkout (double-click Pay, a slow network, a new intent):  {base}/checkout/
  The same as a plain HTML form, no JavaScript:               {base}/checkout/form/
  Swagger UI (offline):  {base}/api/docs/  (DRF)   {base}/ninja/docs  (Django Ninja)
  Admin:                 {base}/admin/

Take a payment twice with one key; the second answer carries Idempotent-Replayed: true:

  curl -i -X POST {base}/charges/ -H 'Idempotency-Key: demo-1' \\
       -H 'Content-Type: application/json' -d '{{"amount": 1000, "currency": "eur"}}'

The same through the DRF API, as the demo user:

  curl -i -X POST {base}/api/charges/ -H 'Authorization: Token {token}' \\
       -H 'Idempotency-Key: demo-2' -H 'Content-Type: application/json' -d '{{"amount": 500}}'

The same through the Django Ninja API, the demo user's token as its API key:

  curl -i -X POST {base}/ninja/charges -H 'X-API-Key: {token}' \\
       -H 'Idempotency-Key: demo-3' -H 'Content-Type: application/json' -d '{{"amount": 700}}'

The counters move with each answer (executed, then replayed):

  curl -s {base}/metrics | grep '^idempotency_requests_total'
"""


def main(port: str) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sample_project.settings")
    import django

    django.setup()
    from sample_project.payments.management.commands.ensure_demo_user import demo_token

    print(HINT.format(base=f"http://127.0.0.1:{port}", token=demo_token()))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "8000")
