"""A TCP proxy between clients and a broker that can drop a connection right after
the broker answered a request of a given API: the request took effect, the client
never hears so, and retries. It also notes the size of every request and response
by API. Runs in a thread of the test process."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

from moldau.testing.process import BrokerProcess


class DroppingProxy:
    def __init__(self, broker_host: str, broker_port: int, listen_port: int = 0) -> None:
        self.broker = (broker_host, broker_port)
        self.listener = socket.create_server(("127.0.0.1", listen_port))
        self.port = self.listener.getsockname()[1]
        self.drops_left = 0
        self.drop_api_key = 0
        self.dropped = 0
        # (api key, request size, response size) of each answered request, in order
        self.exchanges: list[tuple[int, int, int]] = []
        self._lock = threading.Lock()
        self._closed = False
        self._threads: list[threading.Thread] = []
        self._spawn(self._accept)

    def drop_next(self, n: int, api_key: int = 0) -> None:
        with self._lock:
            self.drops_left = n
            self.drop_api_key = api_key

    def _spawn(self, target: object, *args: object) -> None:
        t = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        t.start()
        self._threads.append(t)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.broker)
            except OSError:  # the broker is down: the client sees a closed connection
                _close(client)
                continue
            pending: dict[int, tuple[int, int]] = {}  # correlation id -> api key, size
            self._spawn(self._pump_requests, client, upstream, pending)
            self._spawn(self._pump_responses, upstream, client, pending)

    def _frames(self, sock: socket.socket):  # type: ignore[no-untyped-def]
        buf = b""
        while True:
            try:
                data = sock.recv(1 << 16)
            except OSError:
                return
            if not data:
                return
            buf += data
            while len(buf) >= 4:
                (size,) = struct.unpack_from(">i", buf)
                if len(buf) < 4 + size:
                    break
                yield buf[: 4 + size]
                buf = buf[4 + size :]

    def _pump_requests(
        self, client: socket.socket, upstream: socket.socket, pending: dict[int, tuple[int, int]]
    ) -> None:
        for frame in self._frames(client):
            api_key, _, correlation = struct.unpack_from(">hhi", frame, 4)
            pending[correlation] = (api_key, len(frame))
            try:
                upstream.sendall(frame)
            except OSError:
                break
        _close(client, upstream)

    def _pump_responses(
        self, upstream: socket.socket, client: socket.socket, pending: dict[int, tuple[int, int]]
    ) -> None:
        for frame in self._frames(upstream):
            (correlation,) = struct.unpack_from(">i", frame, 4)
            api_key, size = pending.pop(correlation, (-1, 0))
            with self._lock:
                self.exchanges.append((api_key, size, len(frame)))
                drop = self.drops_left > 0 and api_key == self.drop_api_key
                if drop:
                    self.drops_left -= 1
                    self.dropped += 1
            if drop:
                break  # the broker did the work; the client never hears of it
            try:
                client.sendall(frame)
            except OSError:
                break
        _close(client, upstream)

    def close(self) -> None:
        self._closed = True
        self.listener.close()


def _close(*socks: socket.socket) -> None:
    for s in socks:
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)
        s.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def proxied_broker(data: Path) -> Iterator[tuple[str, DroppingProxy]]:
    """A broker process that tells clients to reach it through a proxy: (bootstrap,
    proxy). The broker is killed at the end, whatever happened."""
    broker_port, proxy_port = free_port(), free_port()
    b = BrokerProcess(
        data, {"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy_port}"}, port=broker_port
    )
    b.start()
    proxy = None
    try:
        proxy = DroppingProxy("127.0.0.1", broker_port, listen_port=proxy_port)
        yield f"127.0.0.1:{proxy_port}", proxy
    finally:
        if proxy is not None:
            proxy.close()
        b.kill()
