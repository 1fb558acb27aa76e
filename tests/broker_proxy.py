"""A TCP proxy to a broker that, armed, swallows everything a client sends from a marker on.

The marker is the start of a publish (AMQP's ``basic.publish`` method frame, Redis'
``LPUSH``): the client's write succeeds, the broker never sees the message nor
answers it, as when the broker resets at that instant.
"""

from __future__ import annotations

import socket
import threading
from contextlib import suppress

#: The bytes that begin a publish: AMQP method class 60 (basic), method 40 (publish).
AMQP_PUBLISH = b"\x00\x3c\x00\x28"
REDIS_PUBLISH = b"LPUSH"


class SwallowingProxy:
    def __init__(self, upstream_port: int, marker: bytes) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self.marker = marker
        self.armed = threading.Event()
        self.swallowed = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port: int = self._listener.getsockname()[1]
        self._closing = threading.Event()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._closing.set()
        for sock in self._sockets:
            with suppress(OSError):
                sock.close()
        self._listener.close()

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                client, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            upstream = socket.create_connection(self.upstream, timeout=5)
            upstream.settimeout(None)
            self._sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket, outgoing: bool) -> None:
        swallowing = False
        with suppress(OSError):
            while data := source.recv(65536):
                if outgoing and self.armed.is_set() and (swallowing or self.marker in data):
                    if not swallowing:
                        swallowing = True
                        target.sendall(data[: data.index(self.marker)])
                    self.swallowed += 1
                    continue
                target.sendall(data)


class CuttableProxy:
    """A TCP proxy to a server (PostgreSQL) that the test can cut and restore.

    Cut, it closes every connection it carries and closes each new one at once:
    to its clients the server is down, while the server itself (shared by other
    suites) keeps running.
    """

    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1") -> None:
        self.upstream = (upstream_host, upstream_port)
        self.cut_off = threading.Event()
        self.refused = 0  # connections closed at once while cut
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port: int = self._listener.getsockname()[1]
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self) -> None:
        self.cut_off.set()
        self._drop_all()

    def restore(self) -> None:
        self.cut_off.clear()

    def close(self) -> None:
        self._closing.set()
        self._drop_all()
        self._listener.close()

    def _drop_all(self) -> None:
        with self._lock:
            carried, self._sockets = self._sockets, []
        for sock in carried:
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with suppress(OSError):
                sock.close()

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                client, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            if self.cut_off.is_set():
                self.refused += 1
                client.close()
                continue
            upstream = socket.create_connection(self.upstream, timeout=5)
            upstream.settimeout(None)
            with self._lock:
                self._sockets += [client, upstream]
            threading.Thread(target=_pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=_pump, args=(upstream, client), daemon=True).start()


def _pump(source: socket.socket, target: socket.socket) -> None:
    with suppress(OSError):
        while data := source.recv(65536):
            target.sendall(data)
    for sock in (source, target):
        with suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
