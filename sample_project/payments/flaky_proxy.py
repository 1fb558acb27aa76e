"""A proxy that loses answers: it lets a request through, reads the server's answer
(so the server has committed), then cuts the client's connection without it.

For ``manage.py pay_through_flaky_proxy`` only: one request per connection, as the
sample's development servers answer with ``Connection: close``.
"""

from __future__ import annotations

import socket
import threading
from contextlib import suppress


class FlakyProxy:
    def __init__(self, host: str, port: int, lose: int = 1, listen: int = 0) -> None:
        self.upstream = (host, port)
        self.lose = lose  # how many answers to lose, from the first
        self.requests = 0
        self._listener = socket.create_server(("127.0.0.1", listen))  # 0: any free port
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        with suppress(OSError):
            self._listener.close()

    def _accept(self) -> None:
        with suppress(OSError):
            while True:
                client, _ = self._listener.accept()
                threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        with client, socket.create_connection(self.upstream, timeout=30) as server:
            request = _read_request(client)
            server.sendall(request)
            answer = b"".join(iter(lambda: server.recv(65536), b""))
            self.requests += 1
            if self.requests <= self.lose:
                # SO_LINGER 0: the close is a reset, as when a connection dies mid-answer.
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01" + b"\x00" * 7)
                return
            client.sendall(answer)


def _read_request(client: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        data += client.recv(65536) or b"\r\n\r\n"
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        ),
        0,
    )
    while len(body) < length:
        body += client.recv(65536)
    # Ask the server to close after its answer: then reading to EOF reads exactly one.
    kept = [line for line in head.split(b"\r\n") if not line.lower().startswith(b"connection:")]
    head = b"\r\n".join(kept)
    return head + b"\r\nConnection: close\r\n\r\n" + body
