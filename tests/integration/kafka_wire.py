"""A minimal raw Kafka protocol client for tests that must send exact (or broken)
bytes: requests are encoded with kio, responses decoded with kio (the schemas of
versions kio lacks from moldau.protocol.legacy_schemas, checked against kio 0.5.0 in
tests/unit/test_legacy_schemas.py)."""

from __future__ import annotations

import io
import socket
import struct
from typing import Any

from kio.serial import entity_reader, entity_writer

from moldau.protocol.codec import is_flexible, response_class


class WireClient:
    def __init__(self, bootstrap: str, timeout: float = 10.0) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def frame(self, api_key: int, version: int, body: bytes, client_id: str = "test") -> bytes:
        self.correlation_id += 1
        head = struct.pack(">hhih", api_key, version, self.correlation_id, len(client_id))
        head += client_id.encode()
        if is_flexible(api_key, version):
            head += b"\x00"
        payload = head + body
        return struct.pack(">i", len(payload)) + payload

    def request(self, request: Any, version: int | None = None) -> Any:
        """Send a kio request; return the decoded kio response."""
        cls = type(request)
        v = cls.__version__ if version is None else version
        self.send_raw(self.encode(request, v))
        return self.read_response(cls.__api_key__, v)

    def encode(self, request: Any, version: int | None = None) -> bytes:
        """A kio request as a frame of the next correlation id (to pipeline several
        requests with one send_raw)."""
        cls = type(request)
        v = cls.__version__ if version is None else version
        buf = io.BytesIO()
        entity_writer(cls)(buf, request)
        return self.frame(cls.__api_key__, v, buf.getvalue())

    def read_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self._read_exactly(4))
        return self._read_exactly(size)

    def read_response(self, api_key: int, version: int, correlation_id: int | None = None) -> Any:
        """The next response, which must answer `correlation_id` (default: the
        last request sent)."""
        data = self.read_frame()
        expected = self.correlation_id if correlation_id is None else correlation_id
        assert struct.unpack_from(">i", data, 0)[0] == expected
        offset = 4
        if is_flexible(api_key, version) and api_key != 18:
            offset += 1  # empty tagged fields of response header v1
        cls = response_class(api_key, version)
        assert cls is not None, (api_key, version)
        value, _ = entity_reader(cls)(memoryview(data).toreadonly(), offset)
        return value

    def _read_exactly(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self.sock.recv(n)
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def is_closed_by_peer(self, timeout: float = 5.0) -> bool:
        """True if the broker closes the connection within `timeout`."""
        self.sock.settimeout(timeout)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False
