"""``manage.py pay_through_flaky_proxy`` pointed at one's own endpoint and port.

The sample itself behind the proxy is ``tests/system/test_client_faults.py``; here the
upstream is a small HTTP server of the test's, which records what reached it.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import StringIO

import pytest
from django.core.management import call_command


class Upstream(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Recorder)
        self.seen: list[tuple[str, str, str, bytes]] = []  # method, path, key, body


class Recorder(BaseHTTPRequestHandler):
    server: Upstream

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.seen.append(("POST", self.path, self.headers["Idempotency-Key"], body))
        answer = json.dumps({"n": len(self.server.seen)}).encode()
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_the_flaky_proxy_command_takes_ones_own_endpoint_body_and_port(
    upstream: Upstream,
) -> None:
    port, out = free_port(), StringIO()
    call_command(
        "pay_through_flaky_proxy",
        "--url",
        f"http://127.0.0.1:{upstream.server_address[1]}/api/v2/payments/?source=proxy",
        "--json",
        '{"order": 42}',
        "--proxy-port",
        str(port),
        stdout=out,
    )
    (first, second) = upstream.seen
    assert first[:2] == second[:2] == ("POST", "/api/v2/payments/?source=proxy")
    assert first[2] == second[2]  # one key for both attempts
    assert json.loads(first[3]) == json.loads(second[3]) == {"order": 42}
    printed = out.getvalue()
    assert f"proxy:    http://127.0.0.1:{port}" in printed
    assert "attempts: 2" in printed
    assert "charges:" not in printed  # counted in the sample's own database only
