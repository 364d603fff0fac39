"""What a request handler receives and may return."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from moldau.protocol.codec import RequestHeader, decode_request
from moldau.protocol.fetch import Part


@dataclass(frozen=True, slots=True)
class ClientInfo:
    host: str
    port: int
    listener: str


@dataclass(slots=True)
class RequestContext:
    header: RequestHeader
    frame: memoryview
    body_offset: int
    client: ClientInfo

    @property
    def version(self) -> int:
        return self.header.api_version

    def body(self) -> Any:
        """The request body decoded with kio (wire.DecodeError if malformed)."""
        return decode_request(self.header, self.frame, self.body_offset)


@dataclass(frozen=True, slots=True)
class RawBody:
    """A response body already encoded (by a hand-written encoder), as parts."""

    parts: list[Part]


# A handler returns a kio response entity, a RawBody, or None (no response: acks=0).
Response = Any
