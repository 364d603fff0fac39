"""A connection answers its requests in the order they came, even when some answers
are known only later (acks=all produces waiting for their ISR): it goes on with the
requests behind such an answer meanwhile, up to MAX_DEFERRED owed answers. A request
that closes the connection does so once those answers are sent. Real sockets on
loopback, a handler that stands in for KafkaApis."""

from __future__ import annotations

import asyncio
import ssl
import struct
from pathlib import Path

import pytest

from moldau.protocol.fetch import Part
from moldau.server import network
from moldau.server.network import Answer, CloseConnection, Connection, SocketServer


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


class Handler:
    """b"now:N" answers at once; b"later:N" answers when the test says so;
    b"close:N" closes the connection (a failed acks=0 produce)."""

    def __init__(self) -> None:
        self.handled: list[bytes] = []
        self.later: dict[bytes, asyncio.Future[list[Part]]] = {}

    async def __call__(self, conn: Connection, payload: memoryview) -> Answer:
        kind, _, name = bytes(payload).partition(b":")
        self.handled.append(name)
        if kind == b"now":
            return [frame(name)]
        if kind == b"close":
            raise CloseConnection("acks=0 produce failed")
        future: asyncio.Future[list[Part]] = asyncio.get_running_loop().create_future()
        self.later[name] = future
        return future

    def answer(self, name: bytes) -> None:
        self.later[name].set_result([frame(name)])


async def serve(
    handler: Handler,
) -> tuple[SocketServer, asyncio.StreamReader, asyncio.StreamWriter]:
    server = SocketServer("127.0.0.1", 0, "PLAINTEXT", handler, 1 << 20, 10, lambda: 0)
    await server.start()
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    return server, reader, writer


async def read_answer(reader: asyncio.StreamReader) -> bytes:
    (size,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 5))
    return await reader.readexactly(size)


async def until(condition: object, timeout: float = 5) -> None:
    async def poll() -> None:
        while not condition():  # type: ignore[operator]
            await asyncio.sleep(0.001)

    await asyncio.wait_for(poll(), timeout)


def test_answers_known_later_do_not_hold_up_the_next_requests_and_go_out_in_order() -> None:
    async def run() -> None:
        handler = Handler()
        server, reader, writer = await serve(handler)
        try:
            for payload in (b"later:a", b"now:b", b"later:c", b"later:d", b"now:e"):
                writer.write(frame(payload))
            await writer.drain()
            # Every request was handled while the first answer is still owed...
            await until(lambda: handler.handled == [b"a", b"b", b"c", b"d", b"e"])
            # ...and nothing goes out before it, whatever is ready behind it.
            handler.answer(b"d")
            handler.answer(b"c")
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(reader.readexactly(1), 0.2)
            handler.answer(b"a")
            assert [await read_answer(reader) for _ in range(5)] == [b"a", b"b", b"c", b"d", b"e"]
            # With nothing owed, answers go straight out again.
            writer.write(frame(b"now:f"))
            assert await read_answer(reader) == b"f"
        finally:
            writer.close()
            await server.stop()

    asyncio.run(run())


def test_a_connection_owing_too_many_answers_handles_nothing_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(network, "MAX_DEFERRED", 2)

    async def run() -> None:
        handler = Handler()
        server, reader, writer = await serve(handler)
        try:
            for payload in (b"later:a", b"later:b", b"now:c"):
                writer.write(frame(payload))
            await until(lambda: len(handler.handled) == 2)
            await asyncio.sleep(0.1)
            assert handler.handled == [b"a", b"b"]
            handler.answer(b"a")
            await until(lambda: len(handler.handled) == 3)
            handler.answer(b"b")
            assert [await read_answer(reader) for _ in range(3)] == [b"a", b"b", b"c"]
        finally:
            writer.close()
            await server.stop()

    asyncio.run(run())


def test_a_request_that_closes_the_connection_waits_for_the_answers_owed_before_it() -> None:
    """Kafka reads no request before it answered the last, so a failed acks=0
    produce behind an acks=all one closes the connection after that one's answer:
    the producer learns its records were appended, and does not send them again."""

    async def run() -> None:
        handler = Handler()
        server, reader, writer = await serve(handler)
        try:
            for payload in (b"later:a", b"now:b", b"close:c", b"now:d"):
                writer.write(frame(payload))
            await writer.drain()
            await until(lambda: handler.handled[:3] == [b"a", b"b", b"c"])
            handler.answer(b"a")
            assert [await read_answer(reader) for _ in range(2)] == [b"a", b"b"]
            # Then the connection is closed; what came after the closing request
            # is never handled.
            assert await asyncio.wait_for(reader.read(), 5) == b""
            assert handler.handled == [b"a", b"b", b"c"]
        finally:
            writer.close()
            await server.stop()

    asyncio.run(run())


def test_tls_clients_stuck_in_their_handshake_hold_a_slot_only_until_its_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from moldau.testing.certs import Certificates

    monkeypatch.setattr(network, "TLS_HANDSHAKE_TIMEOUT_S", 0.5)
    certs = Certificates.create(tmp_path)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(certs.broker())
    client_ctx = ssl.create_default_context(cafile=str(certs.ca))

    async def tls_client() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection(
            "127.0.0.1", server.port, ssl=client_ctx, server_hostname="127.0.0.1"
        )

    async def run() -> None:
        handler = Handler()
        nonlocal server
        server = SocketServer(
            "127.0.0.1", 0, "SSL", handler, 1 << 20, 3, lambda: 0,
            security_protocol="SSL", ssl_context=server_ctx,
        )  # fmt: skip
        await server.start()
        try:
            stuck = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(3)]
            await until(lambda: server.pending_handshakes() == 3)
            # max.connections counts them: a fourth client is refused meanwhile.
            with pytest.raises((ConnectionError, ssl.SSLError, asyncio.IncompleteReadError)):
                reader, writer = await tls_client()
                await asyncio.wait_for(reader.readexactly(1), 5)
            # Dropped at the handshake timeout: others are served again.
            await until(lambda: server.pending_handshakes() == 0)
            reader, writer = await tls_client()
            writer.write(frame(b"now:tls"))
            assert await read_answer(reader) == b"tls"
            (conn,) = server.connections
            assert (conn.session.listener, conn.session.security_protocol) == ("SSL", "SSL")
            assert conn.session.principal == "User:ANONYMOUS"  # no client certificate
            assert server.use_sendfile is False  # sendfile would bypass TLS
            writer.close()
            for _, w in stuck:
                w.close()
        finally:
            await server.stop()

    server: SocketServer
    asyncio.run(run())
