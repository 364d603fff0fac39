"""On a SASL listener a connection starts unauthenticated: until SaslAuthenticate
succeeds it may send ApiVersions, SaslHandshake and SaslAuthenticate only;
anything else closes it (Kafka's SaslServerAuthenticator). Other listeners'
sessions are authenticated from the start."""

from __future__ import annotations

import asyncio
import struct
from types import SimpleNamespace
from typing import Any, cast

import pytest

from moldau.clock import SYSTEM_CLOCK
from moldau.config.broker import BrokerConfig
from moldau.protocol.apis import ApiKey
from moldau.server.apis import KafkaApis
from moldau.server.network import CloseConnection, Connection, SocketServer
from moldau.server.quotas import BrokerQuotas
from moldau.server.request_metrics import RequestMetrics


def request(api_key: int, version: int, body: bytes = b"") -> memoryview:
    client_id = b"test"
    head = struct.pack(">hhih", api_key, version, 7, len(client_id)) + client_id
    return memoryview(head + body)


def connection(protocol: str) -> Any:
    server = SocketServer("127.0.0.1", 0, protocol, None, 1 << 20, 10, lambda: 0,
                          security_protocol=protocol)  # type: ignore[arg-type]  # fmt: skip
    return SimpleNamespace(
        session=server.new_session("10.0.0.1"),
        client=None,
        raw_sasl_tokens=False,
        session_expires_ms=None,
    )


def apis() -> KafkaApis:
    serving = asyncio.Event()
    serving.set()
    config = BrokerConfig()
    broker = SimpleNamespace(
        clock=SYSTEM_CLOCK,
        request_metrics=RequestMetrics(),
        serving=serving,
        config=config,
        quotas=BrokerQuotas(config, SYSTEM_CLOCK),
    )
    return KafkaApis(cast(Any, broker))


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_unauthenticated_sasl_connection_gets_api_versions_only(protocol: str) -> None:
    async def run() -> None:
        conn = connection(protocol)
        assert conn.session.authenticated is False
        assert conn.session.host == "10.0.0.1"
        answer = await apis().handle(cast(Connection, conn), request(ApiKey.API_VERSIONS, 0))
        assert answer  # answered
        for key in (ApiKey.METADATA, ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.CREATE_TOPICS):
            with pytest.raises(CloseConnection, match="before SASL authentication"):
                await apis().handle(cast(Connection, conn), request(key, 1))

    asyncio.run(run())


@pytest.mark.parametrize("protocol", ["PLAINTEXT", "SSL"])
def test_other_listeners_start_authenticated(protocol: str) -> None:
    session = connection(protocol).session
    assert session.authenticated is True
    assert (session.listener, session.security_protocol) == (protocol, protocol)
    assert session.principal == "User:ANONYMOUS"


def test_a_large_request_before_authentication_closes() -> None:
    async def run() -> None:
        conn = connection("SASL_SSL")
        big = request(ApiKey.API_VERSIONS, 0, bytes(524_288))
        with pytest.raises(CloseConnection, match=r"sasl\.server\.max\.receive\.size"):
            await apis().handle(cast(Connection, conn), big)

    asyncio.run(run())


def test_an_expired_sasl_session_closes_on_its_next_request() -> None:
    async def run() -> None:
        conn = connection("SASL_SSL")
        conn.session.authenticated = True
        conn.session_expires_ms = SYSTEM_CLOCK.monotonic_ms() - 1
        with pytest.raises(CloseConnection, match="SASL session expired"):
            await apis().handle(cast(Connection, conn), request(ApiKey.METADATA, 1))

    asyncio.run(run())


def test_logins_are_served_while_the_broker_starts() -> None:
    """The controller logs in to a starting broker to send it the metadata its
    start waits for (a SASL inter-broker listener): holding the login until the
    broker serves would hold that start until its metadata wait times out."""

    async def run() -> None:
        starting = apis()
        starting.broker.serving.clear()
        broker = cast(Any, starting.broker)
        broker.sasl_mechanisms = lambda listener: ["PLAIN"]
        broker.sasl_server = lambda listener, mechanism: object()
        broker.authorizer = None
        conn = connection("SASL_SSL")
        body = struct.pack(">h", 5) + b"PLAIN"
        async with asyncio.timeout(5):
            answer = await starting.handle(cast(Connection, conn), request(17, 1, body))
        assert answer and conn.session.sasl is not None
        # Anything else still waits for the start (here: for ever).
        conn.session.authenticated = True
        held = asyncio.create_task(starting.handle(cast(Connection, conn), request(3, 1)))
        await asyncio.sleep(0.1)
        assert not held.done()
        held.cancel()

    asyncio.run(run())
