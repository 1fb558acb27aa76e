"""An HTTP proxy in front of an app server that loses or fakes answers, on a script.

One request per connection (the sample's gunicorn sync workers close each one).
Each request takes the next fault of the script, then ``forward`` once the script
is empty:

- ``forward``: the request goes to the server, its answer back to the client.
- ``drop``: the request goes to the server and its whole answer comes back to the
  proxy (so the server has committed), then the client's connection is reset: the
  answer is lost on its way, the case a key exists for.
- ``drop_early``: the request goes to the server and the client's connection is
  reset once ``hold()`` returns (e.g. when the request is inside its view), while
  the server is still working; ``answered`` is set when the server's answer arrives.
- :class:`Answer`: the server never sees the request; the proxy answers itself
  (a 503 from a load balancer, a 409 with ``Retry-After``).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str] = field(default_factory=dict)

    def render(self) -> bytes:
        body = b'{"title": "injected by the proxy"}'
        lines = [f"HTTP/1.1 {self.status} Injected", "Connection: close"]
        lines += ["Content-Type: application/problem+json", f"Content-Length: {len(body)}"]
        lines += [f"{name}: {value}" for name, value in self.headers.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


Fault = str | Answer


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    key: str | None
    fault: Fault


class FaultProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self.seen: list[Seen] = []
        self.answered = threading.Event()
        self.hold: Callable[[], None] = lambda: None
        self._faults: list[Fault] = []
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port: int = self._listener.getsockname()[1]
        self._closing = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def script(self, *faults: Fault) -> None:
        with self._lock:
            self._faults = list(faults)
            self.seen.clear()
        self.answered.clear()

    def keys(self) -> list[str | None]:
        return [seen.key for seen in self.seen]

    def close(self) -> None:
        self._closing.set()
        self._listener.close()

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                client, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            raw = _read_request(client)
            with self._lock:
                fault = self._faults.pop(0) if self._faults else "forward"
                self.seen.append(_seen(raw, fault))
            if isinstance(fault, Answer):
                client.sendall(fault.render())
            elif fault == "drop_early":
                self._forward_in_background(raw)
                self.hold()
                _reset(client)
                return
            else:
                answer = _exchange(self.upstream, raw)
                if fault == "drop":
                    _reset(client)
                    return
                client.sendall(answer)
        except OSError:
            pass
        with suppress(OSError):
            client.close()

    def _forward_in_background(self, raw: bytes) -> None:
        def run() -> None:
            _exchange(self.upstream, raw)
            self.answered.set()

        threading.Thread(target=run, daemon=True).start()


def _read_request(client: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = client.recv(65536)
        if not chunk:
            raise OSError("client closed before a whole request")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(_header(head, "content-length") or 0)
    while len(body) < length:
        body += client.recv(65536)
    return head + b"\r\n\r\n" + body


def _header(head: bytes, name: str) -> str | None:
    for line in head.split(b"\r\n")[1:]:
        found, _, value = line.decode("latin-1").partition(":")
        if found.strip().lower() == name:
            return value.strip()
    return None


def _seen(raw: bytes, fault: Fault) -> Seen:
    head = raw.partition(b"\r\n\r\n")[0]
    method, path, *_ = head.split(b"\r\n")[0].decode("latin-1").split(" ")
    return Seen(method, path, _header(head, "idempotency-key"), fault)


def _exchange(upstream: tuple[str, int], raw: bytes) -> bytes:
    """Send ``raw`` to the server and read its whole answer (it closes the connection)."""
    with socket.create_connection(upstream, timeout=60) as server:
        server.sendall(raw)
        answer = b""
        while chunk := server.recv(65536):
            answer += chunk
    return answer


def _reset(sock: socket.socket) -> None:
    with suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    with suppress(OSError):
        sock.close()
