"""A SASL login on a new connection to a broker: SaslHandshake v1, then
SaslAuthenticate v2 until the client is done. A broker's links to other brokers (a
SASL inter-broker listener) use it, and so do the raw requests of `moldau` tools
(cli/admin_call.py). The mechanism's tokens come from a sans-IO client
(security/sasl_client.py); this module only carries them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from moldau.protocol.codec import decode_response, encode_body
from moldau.protocol.errors import ErrorCode, SaslAuthenticationFailedError
from moldau.security.sasl_client import SaslClient
from moldau.server.control_client import Authenticate, roundtrip

_SASL_HANDSHAKE, _SASL_AUTHENTICATE = 17, 36


class SaslLoginRefused(ConnectionError):
    """The broker refused the login (mechanism, credentials) or was not who it
    should be. A ConnectionError, so that a broker's link retries it as any lost
    connection; a tool tells it apart, since trying again cannot help."""


def sasl_authenticator(login: Callable[[], SaslClient], client_id: str) -> Authenticate:
    """What NetworkTransport runs on each new connection (and again on it before
    the session ends); it returns the session lifetime the server granted (ms, 0:
    none). A refusal is a ConnectionError: the link retries later, as after any
    lost connection."""

    async def authenticate(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> int:
        peer = _peer(writer)
        client = login()
        correlation_id = 0

        async def exchange(api_key: int, version: int, body: bytes, flexible: bool) -> Any:
            nonlocal correlation_id
            correlation_id += 1
            raw = await roundtrip(
                reader, writer, correlation_id, client_id, api_key, version, body, flexible, peer
            )
            return decode_response(api_key, version, raw)

        body = encode_body(SaslHandshakeRequest(mechanism=client.mechanism))
        handshake = await exchange(_SASL_HANDSHAKE, 1, body, False)
        if handshake.error_code != ErrorCode.none:
            raise SaslLoginRefused(
                f"{peer} refused SASL {client.mechanism}: "
                f"{handshake.error_code.name.upper()} (enabled: {list(handshake.mechanisms)})"
            )
        challenge: bytes | None = None
        lifetime_ms = 0
        while True:
            try:
                token = client.respond(challenge)
            except SaslAuthenticationFailedError as e:
                raise SaslLoginRefused(f"{peer}: {e.message}") from None
            if token is None:
                return lifetime_ms
            body = encode_body(SaslAuthenticateRequest(auth_bytes=token))
            answer = await exchange(_SASL_AUTHENTICATE, 2, body, True)
            if answer.error_code != ErrorCode.none:
                # Kafka's error name leads, as its SaslAuthenticationException's does.
                why = answer.error_code.name.upper()
                if answer.error_message:
                    why += f": {answer.error_message}"
                raise SaslLoginRefused(f"{peer} refused the SASL login: {why}")
            challenge = bytes(answer.auth_bytes)
            lifetime_ms = int(answer.session_lifetime.total_seconds() * 1000)

    return authenticate


def _peer(writer: asyncio.StreamWriter) -> str:
    address = writer.get_extra_info("peername") or ("?", 0)
    return f"broker at {address[0]}:{address[1]}"
