"""What a request handler receives and may return."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from moldau.protocol.codec import RequestHeader, decode_request
from moldau.protocol.fetch import Part


@dataclass(frozen=True, slots=True)
class ClientInfo:
    host: str
    port: int
    listener: str


@dataclass(slots=True)
class Session:
    """Who is on a connection: one per connection, shared (and changed, by SASL)
    by its requests."""

    listener: str  # listener name, e.g. "SASL_SSL" or "INTERNAL"
    security_protocol: str  # PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL
    principal: str = "User:ANONYMOUS"  # Kafka's KafkaPrincipal as "Type:name"
    host: str = ""  # the client's address (ACLs match on it)
    authenticated: bool = True  # False on SASL listeners until SaslAuthenticate succeeds
    sasl: object | None = None  # the SaslServer in progress, set by SaslHandshake


def _plaintext_session() -> Session:
    return Session("PLAINTEXT", "PLAINTEXT")


@dataclass(slots=True)
class RequestContext:
    header: RequestHeader
    frame: memoryview
    body_offset: int
    client: ClientInfo
    session: Session = field(default_factory=_plaintext_session)
    # Client quotas (server/quotas.py): when handling began, the time spent waiting
    # on others meanwhile (a fetch's long poll), the throttle time found, and
    # whether the request quota has counted this request already.
    started_ns: int = 0
    waited_ns: int = 0
    throttle_ms: int = 0
    quota_recorded: bool = False

    @property
    def principal(self) -> str:
        return self.session.principal

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


@dataclass(frozen=True, slots=True)
class CloseAfter:
    """A response after which the connection is closed (a failed SASL login)."""

    response: Any
    reason: str


@dataclass(frozen=True, slots=True)
class Deferred:
    """A response that is known later (an acks=all produce waiting for its ISR): what
    the request had to change is done, so its connection goes on with the next
    requests meanwhile, and answers them all in order. `build` makes the response
    from the future's result."""

    future: asyncio.Future[Any]
    build: Callable[[Any], Any]


# A handler returns a kio response entity, a RawBody, a Deferred, a CloseAfter, or
# None (no response: acks=0).
Response = Any
