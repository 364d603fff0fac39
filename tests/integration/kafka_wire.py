"""Raw Kafka requests to a broker, for tests that must send exact (or broken)
bytes: a thin layer over moldau.spark.fetch_client.Connection, which frames the
requests and reads and decodes the answers. Requests are kio entities as they are
(the schemas of versions kio lacks come from moldau.protocol.legacy_schemas,
checked against kio 0.5.0 in tests/unit/test_legacy_schemas.py).

A lost connection raises a ConnectionError (Connection's BrokerError); an answer
that does not decode raises DecodeError, which no test takes for a lost one."""

from __future__ import annotations

import struct
from typing import Any

from moldau.protocol.codec import encode_body
from moldau.spark.fetch_client import Connection, decode_answer


class WireClient:
    def __init__(self, bootstrap: str, timeout: float = 10.0, client_id: str = "test") -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.conn = Connection((host, int(port)), client_id, timeout)

    @property
    def correlation_id(self) -> int:
        """The correlation id of the last request framed."""
        return self.conn.correlation

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_raw(self, data: bytes) -> None:
        self.conn.send_raw(data)

    def frame(self, api_key: int, version: int, body: bytes) -> bytes:
        """`body` as a request of the next correlation id, however malformed."""
        return self.conn.frame(api_key, version, body)

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
        return self.frame(cls.__api_key__, v, encode_body(request))

    def read_frame(self) -> bytes:
        return bytes(self.conn.read_frame())

    def read_response(self, api_key: int, version: int, correlation_id: int | None = None) -> Any:
        """The next response, which must answer `correlation_id` (default: the
        last request sent)."""
        data = self.conn.read_frame()
        expected = self.correlation_id if correlation_id is None else correlation_id
        assert struct.unpack_from(">i", data, 0)[0] == expected
        return decode_answer(api_key, version, data)

    def is_closed_by_peer(self, timeout: float = 5.0) -> bool:
        """True if the broker closes the connection within `timeout`."""
        sock = self.conn.sock
        sock.settimeout(timeout)
        try:
            while True:
                if not sock.recv(65536):
                    return True
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False
