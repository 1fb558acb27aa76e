"""`make run`: the sample's server, and once it listens, where to click and a replay by hand.

``python sample_project/hint.py [PORT]``: creates the demo user (demo/demo) and its
API token if missing, so the DRF line below carries a token that works, starts
``manage.py runserver`` on the port, and prints the hint once the server answers
connections (not before, when the first curl would be refused); Ctrl-C stops both.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

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


def serve(port: int, command: list[str], hint: str) -> int:
    """Run the server ``command``; print ``hint`` once it listens on ``port``; its exit code."""
    server = subprocess.Popen(command)
    try:
        if _listening(port, server):
            print(hint, flush=True)
        return server.wait()
    except KeyboardInterrupt:  # Ctrl-C reached the server too: it is in our process group
        return server.wait()


def _listening(port: int, server: subprocess.Popen[bytes]) -> bool:
    """Whether ``server`` listens on ``port`` before it exits (polled: it says nothing)."""
    while server.poll() is None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True
        except OSError:
            time.sleep(0.1)
    return False


def main(port: str) -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sample_project.settings")
    import django

    django.setup()
    from sample_project.payments.management.commands.ensure_demo_user import demo_token

    hint = HINT.format(base=f"http://127.0.0.1:{port}", token=demo_token())
    runserver = [sys.executable, str(ROOT / "manage.py"), "runserver", f"127.0.0.1:{port}"]
    sys.exit(serve(int(port), runserver, hint))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "8000")
