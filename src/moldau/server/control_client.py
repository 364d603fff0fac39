"""How the controller reaches brokers in other processes: LeaderAndIsr, StopReplica
and UpdateMetadata over the Kafka wire protocol, one connection per broker, to the
endpoint the broker registered for the inter-broker listener.

The controller's channel sends one request at a time per broker, so a connection
never has more than one request in flight."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from moldau.protocol.codec import decode_response, encode_body
from moldau.protocol.control import (
    ControlRequest,
    ControlResponse,
)
from moldau.protocol.control_wire import decode_response as decode_control_response
from moldau.protocol.control_wire import encode_request, request_topic_ids
from moldau.protocol.errors import ErrorCode, SaslAuthenticationFailedError
from moldau.protocol.wire import DecodeError, Reader, Writer, pack_i32
from moldau.security.sasl_client import SaslClient

# Where a broker listens, from its registration: (host, port), or None if unknown.
Resolver = Callable[[int], tuple[str, int] | None]

MAX_RESPONSE_BYTES = 16 * 1024 * 1024
_SASL_HANDSHAKE, _SASL_AUTHENTICATE = 17, 36
T = TypeVar("T")


class _Connection:
    def __init__(
        self, address: tuple[str, int], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.address = address
        self.reader = reader
        self.writer = writer
        self.correlation_id = 0

    def close(self) -> None:
        self.writer.close()


class NetworkTransport:
    def __init__(
        self,
        controller_id: int,
        resolve: Resolver,
        timeout_ms: int = 30_000,
        client_id: str | None = None,
        reachable: Callable[[int], bool] | None = None,
        login: Callable[[], SaslClient] | None = None,
    ) -> None:
        # New SASL clients, when the inter-broker listener is a SASL one.
        self._login = login
        self._client_id = client_id or f"controller-{controller_id}"
        # In-process clusters cut a broker off the network (LocalCluster.isolate).
        self._reachable = reachable
        self._resolve = resolve
        self._timeout_s = timeout_ms / 1000
        self._connections: dict[int, _Connection] = {}

    async def send(self, broker_id: int, request: ControlRequest) -> ControlResponse:
        return await self._guarded(broker_id, self._send(broker_id, request))

    async def request(self, broker_id: int, api_key: int, version: int, body: bytes) -> memoryview:
        """Any request to `broker_id` (flexible versions): the response body. For the
        requests a broker sends the controller (AlterPartition)."""
        return await self._guarded(broker_id, self._exchange(broker_id, api_key, version, body))

    async def _guarded(self, broker_id: int, work: Coroutine[Any, Any, T]) -> T:
        if self._reachable is not None and not self._reachable(broker_id):
            work.close()
            self._drop(broker_id)
            raise ConnectionError(f"broker {broker_id} is unreachable")
        try:
            # asyncio.timeout, not wait_for: wait_for (Python 3.11) loses a
            # cancellation that comes as the answer arrives, and a stopping fetcher
            # then runs on.
            async with asyncio.timeout(self._timeout_s):
                return await work
        except asyncio.IncompleteReadError as e:
            # The broker closed the connection (e.g. it restarted since the last
            # request): a connection error, which the caller retries on a new one.
            self._drop(broker_id)
            raise ConnectionError(f"broker {broker_id} closed the connection") from e
        except BaseException:
            # A half-read response leaves the stream unusable: start afresh next time.
            self._drop(broker_id)
            raise

    async def _send(self, broker_id: int, request: ControlRequest) -> ControlResponse:
        api_key, version, body = encode_request(request)
        r = Reader(await self._exchange(broker_id, api_key, version, body))
        try:
            return decode_control_response(api_key, version, r, request_topic_ids(request))
        except DecodeError as e:
            raise ConnectionError(f"broker {broker_id} sent a malformed response: {e}") from e

    async def _exchange(
        self, broker_id: int, api_key: int, version: int, body: bytes
    ) -> memoryview:
        """Send one request (header v2) and return the response body."""
        conn = await self._connection(broker_id)
        return await self._roundtrip(broker_id, conn, api_key, version, body)

    async def _roundtrip(
        self,
        broker_id: int,
        conn: _Connection,
        api_key: int,
        version: int,
        body: bytes,
        flexible: bool = True,
    ) -> memoryview:
        conn.correlation_id += 1
        header = Writer()
        header.int16(api_key)
        header.int16(version)
        header.int32(conn.correlation_id)
        header.nullable_string(self._client_id, flexible=False)
        if flexible:
            header.empty_tagged_fields()
        conn.writer.write(pack_i32(len(header.buf) + len(body)) + bytes(header.buf) + body)
        await conn.writer.drain()
        size = int.from_bytes(await conn.reader.readexactly(4), "big", signed=True)
        if not 0 <= size <= MAX_RESPONSE_BYTES:
            raise ConnectionError(f"broker {broker_id} answered with a frame of {size} bytes")
        frame = await conn.reader.readexactly(size)
        r = Reader(memoryview(frame))
        if r.int32() != conn.correlation_id:
            raise ConnectionError(f"broker {broker_id} answered another request")
        if flexible:
            r.skip_tagged_fields()  # response header v1
        return memoryview(frame)[r.pos :]

    async def _authenticate(self, broker_id: int, conn: _Connection) -> None:
        """SaslHandshake v1, then SaslAuthenticate v2 until the client is done (a
        SASL inter-broker listener). A refusal is a ConnectionError: retried later."""
        assert self._login is not None
        client = self._login()
        body = encode_body(SaslHandshakeRequest(mechanism=client.mechanism))
        raw = await self._roundtrip(broker_id, conn, _SASL_HANDSHAKE, 1, body, flexible=False)
        handshake: Any = decode_response(_SASL_HANDSHAKE, 1, raw)
        if handshake.error_code != ErrorCode.none:
            raise ConnectionError(
                f"broker {broker_id} refused SASL {client.mechanism}: "
                f"{handshake.error_code.name} (enabled: {list(handshake.mechanisms)})"
            )
        challenge: bytes | None = None
        while True:
            try:
                token = client.respond(challenge)
            except SaslAuthenticationFailedError as e:
                raise ConnectionError(f"broker {broker_id}: {e.message}") from None
            if token is None:
                return
            body = encode_body(SaslAuthenticateRequest(auth_bytes=token))
            raw = await self._roundtrip(broker_id, conn, _SASL_AUTHENTICATE, 2, body)
            answer: Any = decode_response(_SASL_AUTHENTICATE, 2, raw)
            if answer.error_code != ErrorCode.none:
                raise ConnectionError(
                    f"broker {broker_id} refused the SASL login: {answer.error_message}"
                )
            challenge = bytes(answer.auth_bytes)

    async def _connection(self, broker_id: int) -> _Connection:
        address = self._resolve(broker_id)
        if address is None:
            raise ConnectionError(f"broker {broker_id} has no known endpoint")
        conn = self._connections.get(broker_id)
        if conn is not None and conn.address == address and not conn.writer.is_closing():
            return conn
        self._drop(broker_id)
        reader, writer = await asyncio.open_connection(*address)
        conn = _Connection(address, reader, writer)
        if self._login is not None:
            try:
                await self._authenticate(broker_id, conn)
            except BaseException:
                conn.close()
                raise
        self._connections[broker_id] = conn
        return conn

    def _drop(self, broker_id: int) -> None:
        conn = self._connections.pop(broker_id, None)
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    async def close(self) -> None:
        for broker_id in list(self._connections):
            self._drop(broker_id)
