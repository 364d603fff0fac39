"""The listener and its connections: bytes in, frames to the request handler,
responses out in request order (Kafka answers a connection's requests in order).

Requests are handled one after the other, as Kafka does, with one exception: an
acks=all Produce, once appended, answers later (a Deferred), and the connection goes
on with the next requests while it waits for the ISR; the answers still go out in
order. Kafka reads nothing more from a connection until it answered; with Python's
slower replication rounds that let a pipelining producer's queue of small requests
wait one round each, so a round now acknowledges every request appended before it.

A request that closes its connection (malformed, or a failed acks=0 produce) does
so once every answer owed before it is sent, handling nothing after it: Kafka
reads nothing more from a connection until it answered, so its clients never lose
an answer to a close (a producer would send again what was appended).

Record data of a Fetch response is sent straight from the segment file with
sendfile when it is large enough to pay for it; smaller slices are read with pread.
sendfile cannot go through TLS: on SSL and SASL_SSL listeners slices are read with
pread in chunks of TLS_CHUNK_BYTES, each written once the transport has room, so a
large fetch holds one chunk in memory, not the whole slice.
A slice holds its segment's file open until it is sent (storage.segment.SegmentFile),
so a segment deleted or closed meanwhile still gives the bytes that were read; one
truncated meanwhile cannot fill its place in the response, so the connection is
closed (as Kafka's FileRecords.writeTo fails). Memory per connection is bounded:
reading pauses while too many request bytes are queued, and a connection's
processing waits while its write buffer is full.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import socket
import ssl
from collections.abc import Awaitable, Callable
from typing import IO, Any, cast

from moldau.protocol.fetch import Part
from moldau.protocol.frames import FrameDecoder, FrameError
from moldau.server.request import ClientInfo, Session
from moldau.storage.segment import FileRecords
from moldau.tasks import TaskOwner

log = logging.getLogger(__name__)

# Read no more while this many request bytes wait to be processed.
MAX_QUEUED_BYTES = 16 * 1024 * 1024
# File slices at least this large go out with sendfile; below, pread + write is cheaper.
SENDFILE_MIN_BYTES = 256 * 1024
# Answers a connection may owe (acks=all produces waiting for their ISR) before it
# handles no more requests.
MAX_DEFERRED = 64
# How long a stopping server waits for its connections to send what they hold.
STOP_GRACE_S = 2.0
_WRITE_HIGH_WATER = 4 * 1024 * 1024
# File slices read for a TLS transport go out in pieces this large.
TLS_CHUNK_BYTES = 1024 * 1024
# A TLS client that has not finished its handshake by then is dropped (a
# connection stuck half way holds a slot of max.connections meanwhile).
TLS_HANDSHAKE_TIMEOUT_S = 10.0
# The principal of a TLS client from its certificate (ssl.getpeercert()); None
# refuses the client (no ssl.principal.mapping.rules rule matched).
PrincipalOf = Callable[[dict[str, Any] | None], str | None]

# Response parts, None (no response, e.g. acks=0), or a future of parts (an answer
# known later, sent in its turn).
Answer = list[Part] | None | asyncio.Future[list[Part]]
# (client, frame) -> its answer; raises CloseConnection to drop the connection.
FrameHandler = Callable[["Connection", memoryview], Awaitable[Answer]]


class CloseConnection(Exception):
    """The request was malformed: close this connection (and only this one)."""


class AnswerThenClose(Exception):
    """Send this answer, then close the connection (a failed SASL login)."""

    def __init__(self, parts: list[Part], reason: str) -> None:
        super().__init__(reason)
        self.parts = parts


class _SendfileFile:
    """Just enough of a file object for loop.sendfile (no fallback) over a shared
    segment fd."""

    mode = "rb"

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def fileno(self) -> int:
        return self._fd

    def seek(self, offset: int, whence: int = 0) -> int:
        # loop.sendfile repositions the file when done; reads use pread and writes
        # O_APPEND, so the shared fd's position is irrelevant.
        return offset


class Connection(asyncio.Protocol):
    def __init__(self, server: SocketServer) -> None:
        self.server = server
        self.decoder = FrameDecoder(server.max_request_bytes)
        self.frames: collections.deque[memoryview] = collections.deque()
        self.queued_bytes = 0
        self.transport: asyncio.Transport | None = None
        self.client = ClientInfo("", 0, server.listener_name)
        self.session = server.new_session("")
        # After a SaslHandshake v0: frames are bare SASL tokens until the login ends.
        self.raw_sasl_tokens = False
        # When the SASL session ends unless renewed (KIP-368); None: never.
        self.session_expires_ms: int | None = None
        self._wakeup = asyncio.Event()
        self._can_write = asyncio.Event()
        self._can_write.set()
        self._reading_paused = False
        self._task: asyncio.Task[None] | None = None
        # Answers owed, in request order, and the task that sends them.
        self._owed: collections.deque[asyncio.Future[list[Part]]] = collections.deque()
        self._owed_sent = asyncio.Event()
        self._answerer: asyncio.Task[None] | None = None
        self.closed = False
        self.last_active_ms = server.now_ms()
        # A client quota's throttle (KIP-219): once this request's answer is on its
        # way, nothing more is read from the client for this long.
        self.throttle_ms = 0

    # -- asyncio.Protocol ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are Transports without subclassing asyncio.Transport.
        transport = cast(asyncio.Transport, transport)
        self.transport = transport
        self.server.handshaking.pop(self, None)
        if self.closed:
            # Refused at accept (max.connections, isolated) before it had a transport.
            transport.abort()
            return
        peer = transport.get_extra_info("peername") or ("", 0)
        self.client = ClientInfo(str(peer[0]), int(peer[1]), self.server.listener_name)
        self.session = self.server.new_session(self.client.host)
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is not None and not self._tls_principal(ssl_object):
            transport.abort()
            return
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        transport.set_write_buffer_limits(high=_WRITE_HIGH_WATER)
        self.server.connections.add(self)
        self._task = self.server.tasks.spawn(self._process(), f"conn-{self.client.port}")

    def _tls_principal(self, ssl_object: ssl.SSLObject) -> bool:
        """The session's principal from the client's certificate (Kafka's SSL
        principal; a SASL listener's comes from SASL later); False refuses it."""
        principal_of = self.server.principal_of
        if principal_of is None:
            return True
        cert = ssl_object.getpeercert()
        principal = principal_of(cert)
        if principal is None:
            log.warning(
                "refusing TLS client %s:%d on listener %s: no ssl.principal.mapping.rules "
                "rule maps its certificate", self.client.host, self.client.port,
                self.server.listener_name,
            )  # fmt: skip
            return False
        if cert and not self.session.security_protocol.startswith("SASL"):
            self.session.principal = principal
            log.info(
                "TLS client %s:%d on listener %s is %s",
                self.client.host, self.client.port, self.server.listener_name, principal,
            )  # fmt: skip
        return True

    def data_received(self, data: bytes) -> None:
        try:
            frames = self.decoder.feed(data)
        except FrameError as e:
            log.warning("closing connection from %s:%d: %s", self.client.host, self.client.port, e)
            self.close()
            return
        if frames:
            self.frames.extend(frames)
            self.queued_bytes += sum(len(f) for f in frames)
            self._wakeup.set()
        self.last_active_ms = self.server.now_ms()
        if self.queued_bytes > MAX_QUEUED_BYTES and not self._reading_paused:
            assert self.transport is not None
            self.transport.pause_reading()
            self._reading_paused = True

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.connections.discard(self)
        self._can_write.set()
        if self._task is not None:
            self._task.cancel()
        if self._answerer is not None:
            self._answerer.cancel()

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    # -- processing ----------------------------------------------------------------------

    async def _process(self) -> None:
        handler = self.server.handler
        while not self.closed:
            if not self.frames:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            frame = self.frames.popleft()
            self.queued_bytes -= len(frame)
            if self._reading_paused and self.queued_bytes <= MAX_QUEUED_BYTES // 2:
                assert self.transport is not None
                self.transport.resume_reading()
                self._reading_paused = False
            try:
                answer = await handler(self, frame)
            except CloseConnection as e:
                log.warning(
                    "closing connection from %s:%d: %s", self.client.host, self.client.port, e
                )
                await self._close_when_answered()
                return
            except AnswerThenClose as e:
                log.info("closing connection from %s:%d: %s", self.client.host, self.client.port, e)
                await self._owe(e.parts)
                await self._close_when_answered()
                return
            if isinstance(answer, asyncio.Future) or self._owed:
                await self._owe(answer)
            elif answer and not self.closed:
                await self._write(answer)
            # Sent or queued: let go of its file slices (they close deleted files).
            del answer
            self.last_active_ms = self.server.now_ms()
            if self.throttle_ms:
                await self._muted()

    async def _muted(self) -> None:
        """Read nothing for the throttle time (Kafka mutes the channel); requests
        already read wait too, as they would in Kafka's socket buffer."""
        ms, self.throttle_ms = self.throttle_ms, 0
        transport = self.transport
        assert transport is not None
        if not self._reading_paused:
            transport.pause_reading()
        try:
            await asyncio.sleep(ms / 1000)
        finally:
            if not self.closed and not self._reading_paused:
                transport.resume_reading()

    async def _close_when_answered(self) -> None:
        """Close once the answers still owed are sent, handling nothing more."""
        if self.transport is not None and not self.closed:
            self.transport.pause_reading()
        answerer = self._answerer
        if answerer is not None and not answerer.done():
            # It sends every owed answer, the last one whole, then ends.
            await asyncio.wait([answerer])
        self.close()

    async def _owe(self, answer: Answer) -> None:
        """Queue an answer behind those still owed; wait while too many are."""
        if not isinstance(answer, asyncio.Future):
            ready: asyncio.Future[list[Part]] = asyncio.get_running_loop().create_future()
            ready.set_result(answer or [])
            answer = ready
        self._owed.append(answer)
        if self._answerer is None or self._answerer.done():
            self._answerer = self.server.tasks.spawn(
                self._send_owed(), f"conn-{self.client.port}-answers"
            )
        while len(self._owed) >= MAX_DEFERRED and not self.closed:
            self._owed_sent.clear()
            await self._owed_sent.wait()

    async def _send_owed(self) -> None:
        while self._owed and not self.closed:
            parts = await self._owed[0]
            self._owed.popleft()
            if parts:
                await self._write(parts)
            del parts  # sent: let go of its file slices
            self._owed_sent.set()
            self.last_active_ms = self.server.now_ms()

    async def _write(self, parts: list[Part]) -> None:
        transport = self.transport
        assert transport is not None
        for part in parts:
            if isinstance(part, FileRecords):
                if not await self._write_file(part):
                    return
            else:
                transport.write(part)  # type: ignore[arg-type]
        if not self._can_write.is_set():
            await self._can_write.wait()

    async def _write_file(self, part: FileRecords) -> bool:
        """Send a file slice whole; False if it could not be (the connection is
        then closed: the response would be malformed)."""
        assert self.transport is not None
        try:
            if part.size >= SENDFILE_MIN_BYTES and self.server.use_sendfile:
                sent = await self._sendfile(part)
            elif part.size > TLS_CHUNK_BYTES and self.server.tls:
                sent = await self._write_chunks(part)
            else:
                data = part.read()
                sent = len(data)
                self.transport.write(data)
        except (ConnectionError, RuntimeError) as e:  # the peer is gone, or closing
            log.info("sendfile to %s:%d failed: %s", self.client.host, self.client.port, e)
            self.close()
            return False
        except OSError as e:
            # The segment could not be read (a failing disk): Kafka closes too.
            log.warning(
                "reading records for %s:%d failed: %s; closing connection",
                self.client.host, self.client.port, e,
            )  # fmt: skip
            self.close()
            return False
        if sent != part.size:
            # The segment was truncated since it was read (a follower cut its log):
            # Kafka's FileRecords.writeTo fails the same way.
            log.warning(
                "records for %s:%d cut short (%d of %d bytes): closing connection",
                self.client.host, self.client.port, sent, part.size,
            )  # fmt: skip
            self.close()
            return False
        return True

    async def _write_chunks(self, part: FileRecords) -> int:
        """pread + write in chunks, each once the transport has room: the bytes sent
        (fewer if the file was truncated meanwhile)."""
        assert self.transport is not None
        fd = part.file.fd
        sent = 0
        while sent < part.size and not self.closed:
            n = min(TLS_CHUNK_BYTES, part.size - sent)
            data = await asyncio.to_thread(os.pread, fd, n, part.position + sent)
            if not data:
                break
            self.transport.write(data)
            sent += len(data)
            if not self._can_write.is_set():
                await self._can_write.wait()
        if self.closed:
            raise ConnectionError("closed while sending")
        return sent

    async def _sendfile(self, part: FileRecords) -> int:
        """The bytes sent. No fallback: asyncio's reads the file object, and this
        one only lends a descriptor."""
        assert self.transport is not None
        file = cast(IO[bytes], _SendfileFile(part.file.fd))
        try:
            return await asyncio.get_running_loop().sendfile(
                self.transport, file, part.position, part.size, fallback=False
            )
        except asyncio.SendfileNotAvailableError as e:
            # The first os.sendfile call failed: asyncio keeps its OSError from us.
            raise OSError(f"sendfile failed: {e}") from e


class TlsConnection(Connection, asyncio.BufferedProtocol):
    """A connection of a TLS listener. asyncio's TLS layer decrypts into the
    buffer a BufferedProtocol lends it, every record of what arrived in one go;
    given a plain Protocol, it allocates 256 KiB per TLS record of 16 KiB and
    joins them: 400 MB took 0.55 s of CPU so, 0.19 s this way."""

    _READ_BYTES = 256 * 1024

    def __init__(self, server: SocketServer) -> None:
        super().__init__(server)
        # Made on the first read, after the handshake: a client that never finishes
        # its handshake costs no buffer (1,000 of them held 250 MB so).
        self._buffer = bytearray()

    def get_buffer(self, sizehint: int) -> memoryview:
        if len(self._buffer) < max(sizehint, self._READ_BYTES):
            self._buffer = bytearray(max(sizehint, self._READ_BYTES))
        return memoryview(self._buffer)

    def buffer_updated(self, nbytes: int) -> None:
        # A copy: frames outlive the buffer, which the next read overwrites.
        self.data_received(bytes(memoryview(self._buffer)[:nbytes]))


class SocketServer:
    def __init__(
        self,
        host: str,
        port: int,
        listener_name: str,
        handler: FrameHandler,
        max_request_bytes: int,
        max_connections: int,
        now_ms: Callable[[], int],
        use_sendfile: bool = True,
        security_protocol: str = "PLAINTEXT",
        ssl_context: ssl.SSLContext | None = None,
        principal_of: PrincipalOf | None = None,
    ) -> None:
        """`ssl_context` for SSL and SASL_SSL listeners; `principal_of` maps a TLS
        client's certificate to its principal."""
        self.host = host
        self.port = port
        self.listener_name = listener_name
        self.handler = handler
        self.max_request_bytes = max_request_bytes
        self.max_connections = max_connections
        self.now_ms = now_ms
        self.security_protocol = security_protocol
        self.ssl_context = ssl_context
        self.principal_of = principal_of
        self.tls = ssl_context is not None
        # sendfile would bypass TLS.
        self.use_sendfile = use_sendfile and not self.tls
        self.connections: set[Connection] = set()
        # Accepted, still in their TLS handshake: when each was accepted (asyncio
        # tells a protocol nothing of a handshake that fails or times out).
        self.handshaking: dict[Connection, float] = {}
        self.tasks = TaskOwner(f"listener-{listener_name}")
        self._server: asyncio.Server | None = None
        self.isolated = False

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self.use_sendfile and type(loop).sendfile is asyncio.AbstractEventLoop.sendfile:
            # uvloop has no loop.sendfile: its fetches read the slices with pread.
            log.info("event loop %s has no sendfile: fetches use pread", type(loop).__name__)
            self.use_sendfile = False
        self._server = await loop.create_server(
            self._accept,
            self.host or None,
            self.port,
            reuse_address=True,
            backlog=1024,
            ssl=self.ssl_context,
            ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S if self.tls else None,
        )
        sock = self._server.sockets[0]
        self.port = int(sock.getsockname()[1])

    def isolate(self, isolated: bool) -> None:
        """Drop every connection and refuse new ones, as if the network were cut
        (LocalCluster.isolate); False takes connections again."""
        self.isolated = isolated
        if isolated:
            for conn in list(self.connections):
                conn.close()

    def pending_handshakes(self) -> int:
        """TLS connections still in their handshake, forgetting those past the
        handshake timeout (asyncio has dropped them)."""
        if self.handshaking:
            cutoff = asyncio.get_running_loop().time() - TLS_HANDSHAKE_TIMEOUT_S
            for conn, accepted in list(self.handshaking.items()):
                if accepted < cutoff or conn.closed:
                    del self.handshaking[conn]
        return len(self.handshaking)

    def new_session(self, host: str) -> Session:
        """A connection's session: on a SASL listener it starts unauthenticated."""
        return Session(
            self.listener_name,
            self.security_protocol,
            host=host,
            authenticated=not self.security_protocol.startswith("SASL"),
        )

    def _accept(self) -> Connection:
        conn = TlsConnection(self) if self.tls else Connection(self)
        if self.isolated:
            conn.closed = True
            asyncio.get_running_loop().call_soon(conn.close)
        elif len(self.connections) + self.pending_handshakes() >= self.max_connections:
            log.warning("max.connections %d reached: refusing a connection", self.max_connections)
            conn.closed = True
            asyncio.get_running_loop().call_soon(conn.close)
        elif self.tls:
            self.handshaking[conn] = asyncio.get_running_loop().time()
        return conn

    def close_idle(self, max_idle_ms: int) -> None:
        now = self.now_ms()
        for conn in list(self.connections):
            if now - conn.last_active_ms > max_idle_ms and not conn.frames and not conn._owed:
                conn.close()

    async def stop(self) -> None:
        """Stop accepting, close every connection, wait for their tasks. A connection
        whose peer does not read what is left to send is cut after a grace period
        (a closing transport waits for its buffer to drain)."""
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.close()
        await self.tasks.close()
        if self._server is not None:
            try:
                async with asyncio.timeout(STOP_GRACE_S):
                    await self._server.wait_closed()
            except TimeoutError:
                for conn in list(self.connections):
                    if conn.transport is not None:
                        conn.transport.abort()
                await self._server.wait_closed()
