"""Scripted toy servers over real HTTP/1.1 (keep-alive), for the runner's transport and dialect.

``Toy`` is a small, correct Idempotency-Key server in the draft's sense: one entry per
(caller, key), the first answer replayed to the same body, 422 to another, 400 without a
key; ``POST /charges/`` creates (``{"id": n}``), ``GET /count/`` answers
``{"count": n}``. Each subclass breaks or bends one thing. Served by the standard
library's threaded server, each connection its own handler: what a toy does to a
connection (close it, reset it) happens to the runner's real sockets. It records every
request it received, so a test can assert on what the runner sent.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

JSON = {"Content-Type": "application/json"}
PROBLEM = {"Content-Type": "application/problem+json"}


@dataclass
class Reply:
    status: int
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=lambda: dict(JSON))
    # What happens to the connection's next request: "" (answered), "close" or "reset".
    then: str = ""

    def encoded(self) -> bytes:
        return json.dumps(self.body).encode() if self.body is not None else b""


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]  # names in lower case
    body: bytes

    @property
    def caller(self) -> str:
        return self.headers.get("authorization", "")

    @property
    def key(self) -> str | None:
        return self.headers.get("idempotency-key")


class Toy:
    """A correct server; ``answer`` is what subclasses bend."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.effects = 0
        self.received: list[Request] = []
        self.stored: dict[tuple[str, str], tuple[bytes, Reply]] = {}

    def handle(self, request: Request) -> Reply:
        with self.lock:
            self.received.append(request)
        if request.method == "GET":
            return self.count(request)
        return self.answer(request)

    def count(self, request: Request) -> Reply:
        return Reply(200, {"count": self.effects})

    def answer(self, request: Request) -> Reply:
        key = request.key
        if key is None:
            return Reply(400, {"status": 400, "title": "no key"}, PROBLEM)
        with self.lock:
            entry = self.stored.get(self.scope(request))
            if entry is not None:
                return self.again(request, *entry)
            reply = self.execute(request)
            self.stored[self.scope(request)] = (request.body, reply)
            return reply

    def scope(self, request: Request) -> tuple[str, str]:
        return request.caller, str(request.key)

    def again(self, request: Request, body: bytes, reply: Reply) -> Reply:
        if request.body != body:
            return Reply(422, {"status": 422, "title": "another body"}, PROBLEM)
        return Reply(reply.status, reply.body, {**reply.headers, "Idempotent-Replayed": "true"})

    def execute(self, request: Request) -> Reply:
        data = json.loads(request.body)
        if not isinstance(data, dict):
            return Reply(400, {"status": 400, "title": "send an object"}, PROBLEM)
        self.effects += 1
        return Reply(201, {"id": self.effects, "amount": data.get("amount")})


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the runner's connections are reused
    server: _Server
    dropping = ""  # this connection's fate for its next request, set by a reply's ``then``

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def _serve(self, method: str) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.dropping:
            self._drop()
            return
        headers = {name.lower(): value for name, value in self.headers.items()}
        reply = self.server.toy.handle(Request(method, self.path, headers, body))
        if not reply.status:  # no answer at all: the connection is dropped under the request
            self.dropping = reply.then
            self._drop()
            return
        content = reply.encoded()
        self.send_response(reply.status)
        for name, value in {**reply.headers, "Content-Length": str(len(content))}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(content)
        self.dropping = reply.then

    def _drop(self) -> None:
        if self.dropping == "reset":  # RST, not FIN: the client reads "connection reset"
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64  # a storm's connections all wait in the listen backlog

    def __init__(self, toy: Toy) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.toy = toy

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that gave up (a timeout) leaves a broken pipe: not the toy's business


@contextmanager
def serving(toy: Toy) -> Iterator[str]:
    """``toy`` served on a free port; yields its base URL."""
    server = _Server(toy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
