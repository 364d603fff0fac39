"""How the controller reaches brokers in other processes: LeaderAndIsr, StopReplica
and UpdateMetadata over the Kafka wire protocol, one connection per broker, to the
endpoint the broker registered for the inter-broker listener.

The controller's channel sends one request at a time per broker, so a connection
never has more than one request in flight."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from moldau.clock import SYSTEM_CLOCK, Clock
from moldau.protocol.apis import ApiKey
from moldau.protocol.codec import is_flexible
from moldau.protocol.control import (
    ControlRequest,
    ControlResponse,
)
from moldau.protocol.control_wire import decode_response, encode_request, request_topic_ids
from moldau.protocol.wire import DecodeError, Reader, Writer, pack_i32

# Where a broker listens, from its registration: (host, port), or None if unknown.
Resolver = Callable[[int], tuple[str, int] | None]

# Run on a new connection before its first request: the SASL login of the
# inter-broker links (server/inter_broker_sasl.py). It returns the session
# lifetime the server granted (ms; 0: no limit), and runs again on the same
# connection before that ends.
Authenticate = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[int]]


def reauthentication_due_ms(logged_in_ms: int, session_lifetime_ms: int) -> int | None:
    """When a link logs in again (KIP-368): at 85% of the session the server
    granted, as Kafka's clients do (they pick 85-95%), so that no request meets a
    session that has ended (connections.max.reauth.ms: the server closes it).
    None where the server set no limit."""
    if session_lifetime_ms <= 0:
        return None
    return logged_in_ms + session_lifetime_ms * 85 // 100


MAX_RESPONSE_BYTES = 16 * 1024 * 1024
#: How long close() waits for its connections to finish shutting down.
_CLOSE_TIMEOUT_S = 1.0
T = TypeVar("T")


async def roundtrip(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    correlation_id: int,
    client_id: str,
    api_key: int,
    version: int,
    body: bytes,
    flexible: bool = True,
    peer: str = "broker",
) -> memoryview:
    """One request (header v2, or v1 if not `flexible`) and its response's body."""
    header = Writer()
    header.int16(api_key)
    header.int16(version)
    header.int32(correlation_id)
    header.nullable_string(client_id, flexible=False)
    if flexible:
        header.empty_tagged_fields()
    writer.write(pack_i32(len(header.buf) + len(body)) + bytes(header.buf) + body)
    await writer.drain()
    size = int.from_bytes(await reader.readexactly(4), "big", signed=True)
    if not 0 <= size <= MAX_RESPONSE_BYTES:
        raise ConnectionError(f"{peer} answered with a frame of {size} bytes")
    frame = await reader.readexactly(size)
    r = Reader(memoryview(frame))
    if r.int32() != correlation_id:
        raise ConnectionError(f"{peer} answered another request")
    # Response header v1, except ApiVersions' answer, which is always v0 (a client that
    # does not yet know the broker's versions must be able to read it).
    if flexible and api_key != ApiKey.API_VERSIONS:
        r.skip_tagged_fields()
    return memoryview(frame)[r.pos :]


class _Connection:
    def __init__(
        self, address: tuple[str, int], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.address = address
        self.reader = reader
        self.writer = writer
        self.correlation_id = 0
        self.reauthenticate_at_ms: int | None = None

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
        ssl_context: ssl.SSLContext | None = None,
        authenticate: Authenticate | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """`ssl_context`: connect with TLS (the inter-broker listener is SSL or
        SASL_SSL); `authenticate`: what a new connection does first (SASL), and
        again before the session it got ends."""
        self._ssl = ssl_context
        self._authenticate = authenticate
        self._clock = clock
        self._client_id = client_id or f"controller-{controller_id}"
        # In-process clusters cut a broker off the network (LocalCluster.isolate).
        self._reachable = reachable
        self._resolve = resolve
        self._timeout_s = timeout_ms / 1000
        self._connections: dict[int, _Connection] = {}
        # Connections closed but maybe not yet shut down (TLS says goodbye first),
        # each a task that ends when its socket is closed: close() waits for them, so
        # that a loop closed right after (a tool's) leaks no socket.
        self._closing: set[asyncio.Task[None]] = set()

    async def send(self, broker_id: int, request: ControlRequest) -> ControlResponse:
        return await self._guarded(broker_id, self._send(broker_id, request))

    async def request(self, broker_id: int, api_key: int, version: int, body: bytes) -> memoryview:
        """Any request to `broker_id`: the response body. For the requests a broker
        sends the controller (AlterPartition) and the tools' one-off requests (some,
        such as OffsetDelete, have no flexible version)."""
        flexible = is_flexible(api_key, version)
        return await self._guarded(
            broker_id, self._exchange(broker_id, api_key, version, body, flexible)
        )

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
            return decode_response(api_key, version, r, request_topic_ids(request))
        except DecodeError as e:
            raise ConnectionError(f"broker {broker_id} sent a malformed response: {e}") from e

    async def _exchange(
        self, broker_id: int, api_key: int, version: int, body: bytes, flexible: bool = True
    ) -> memoryview:
        """Send one request (header v2, v1 if not `flexible`) and return the response body."""
        conn = await self._connection(broker_id)
        conn.correlation_id += 1
        return await roundtrip(
            conn.reader,
            conn.writer,
            conn.correlation_id,
            self._client_id,
            api_key,
            version,
            body,
            flexible,
            peer=f"broker {broker_id}",
        )

    async def _connection(self, broker_id: int) -> _Connection:
        address = self._resolve(broker_id)
        if address is None:
            raise ConnectionError(f"broker {broker_id} has no known endpoint")
        conn = self._connections.get(broker_id)
        if conn is not None and conn.address == address and not conn.writer.is_closing():
            due = conn.reauthenticate_at_ms
            if due is not None and self._clock.monotonic_ms() >= due:
                await self._login(conn)
            return conn
        self._drop(broker_id)
        if self._ssl is None:
            reader, writer = await asyncio.open_connection(*address)
        else:
            # The host name as registered is what the broker's certificate names.
            reader, writer = await asyncio.open_connection(
                *address, ssl=self._ssl, server_hostname=address[0]
            )
        conn = self._connections[broker_id] = _Connection(address, reader, writer)
        if self._authenticate is not None:
            await self._login(conn)
        return conn

    async def _login(self, conn: _Connection) -> None:
        assert self._authenticate is not None
        started = self._clock.monotonic_ms()  # the server counts from a little later
        lifetime = await self._authenticate(conn.reader, conn.writer)
        conn.reauthenticate_at_ms = reauthentication_due_ms(started, lifetime)

    def _drop(self, broker_id: int) -> None:
        conn = self._connections.pop(broker_id, None)
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()
            closed = asyncio.ensure_future(_closed(conn.writer))
            self._closing.add(closed)
            closed.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        for broker_id in list(self._connections):
            self._drop(broker_id)
        if self._closing:
            # Bounded: a peer that never answers TLS's close_notify holds no one up.
            await asyncio.wait(list(self._closing), timeout=_CLOSE_TIMEOUT_S)


async def _closed(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(Exception):  # a reset connection is closed too
        await writer.wait_closed()
