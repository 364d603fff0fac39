"""KIP-368 on the links between brokers: a link logs in again on its connection
before the session the server granted (connections.max.reauth.ms) ends, so the
server never closes it under a request; with no limit it logs in once."""

from __future__ import annotations

import asyncio
import struct

import pytest

from moldau.clock import FakeClock
from moldau.server.control_client import NetworkTransport, reauthentication_due_ms


class _Broker:
    """The far end of the links: answers each request with an empty body."""

    def __init__(self) -> None:
        self.connections = 0
        self.logins = 0

    async def open_connection(
        self, *address: object, **kwargs: object
    ) -> tuple[asyncio.StreamReader, _Writer]:
        self.connections += 1
        reader = asyncio.StreamReader()
        return reader, _Writer(reader)


class _Writer:
    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    def write(self, data: bytes) -> None:
        correlation_id = struct.unpack_from(">i", data, 8)[0]  # size, key, version, id
        self._reader.feed_data(struct.pack(">iib", 5, correlation_id, 0))

    async def drain(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass


def test_when_a_link_logs_in_again() -> None:
    assert reauthentication_due_ms(10_000, 0) is None
    assert reauthentication_due_ms(10_000, 1000) == 10_850


@pytest.mark.parametrize("lifetime_ms", [1000, 0])
def test_a_link_logs_in_again_on_its_connection_before_its_session_ends(
    monkeypatch: pytest.MonkeyPatch, lifetime_ms: int
) -> None:
    far = _Broker()
    monkeypatch.setattr(asyncio, "open_connection", far.open_connection)
    clock = FakeClock()

    async def authenticate(reader: object, writer: object) -> int:
        far.logins += 1
        return lifetime_ms

    async def run() -> None:
        link = NetworkTransport(1, lambda _: ("127.0.0.1", 9092), authenticate=authenticate,
                                clock=clock)  # fmt: skip
        await link.request(2, 18, 3, b"")
        assert far.logins == 1
        clock.advance(849)
        await link.request(2, 18, 3, b"")
        assert far.logins == 1
        clock.advance(1)
        await link.request(2, 18, 3, b"")
        assert far.logins == (2 if lifetime_ms else 1)
        clock.advance(849)
        await link.request(2, 18, 3, b"")
        clock.advance(1)
        await link.request(2, 18, 3, b"")
        assert far.logins == (3 if lifetime_ms else 1)
        assert far.connections == 1  # on the same connection, as Kafka's clients
        await link.close()

    asyncio.run(run())
