"""The client side of PLAIN and SCRAM: a broker's own connections to other brokers
on a SASL inter-broker listener (`sasl.mechanism.inter.broker.protocol`, the user
and password from that listener's JAAS `username`/`password` options, as Kafka's
login modules take them), and the raw requests of `moldau` tools (the user and
password of their --command-config). Sans-IO: tokens in, tokens out."""

from __future__ import annotations

import base64
import hmac
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from moldau.protocol.errors import SaslAuthenticationFailedError
from moldau.security import plain
from moldau.security.credentials import (
    ScramMechanism,
    credential_from_salted,
    hmac_,
    salted_password,
)
from moldau.security.sasl import SUPPORTED_MECHANISMS, jaas_options
from moldau.security.scram import secure_nonce

if TYPE_CHECKING:
    from moldau.config.broker import BrokerConfig


class SaslClient(Protocol):
    mechanism: str

    def respond(self, challenge: bytes | None) -> bytes | None:
        """The next token for the server's challenge (None: the first token);
        None once the exchange is over. Raises SaslAuthenticationFailedError if
        the server is not who it should be (SCRAM's server signature)."""
        ...


class PlainClient:
    mechanism = plain.MECHANISM

    def __init__(self, username: str, password: str) -> None:
        self._token: bytes | None = f"\0{username}\0{password}".encode()

    def respond(self, challenge: bytes | None) -> bytes | None:
        token, self._token = self._token, None
        return token


class ScramClient:
    def __init__(
        self,
        mechanism: ScramMechanism,
        username: str,
        password: str,
        nonce: Callable[[], str] = secure_nonce,
    ) -> None:
        self.mechanism = mechanism.mechanism_name
        self._mech = mechanism
        self._password = password
        name = username.replace("=", "=3D").replace(",", "=2C")
        self._nonce = nonce()
        self._bare = f"n={name},r={self._nonce}"
        self._step = 0
        self._server_signature = b""

    def respond(self, challenge: bytes | None) -> bytes | None:
        self._step += 1
        if self._step == 1:
            return f"n,,{self._bare}".encode()
        assert challenge is not None
        if self._step == 2:
            return self._client_final(challenge.decode())
        expected = b"v=" + base64.b64encode(self._server_signature)
        if not hmac.compare_digest(challenge, expected):
            raise SaslAuthenticationFailedError("SCRAM: invalid server signature")
        return None

    def _client_final(self, server_first: str) -> bytes:
        fields = dict(f.split("=", 1) for f in server_first.split(",") if "=" in f)
        nonce = fields.get("r", "")
        if not nonce.startswith(self._nonce) or nonce == self._nonce:
            raise SaslAuthenticationFailedError("SCRAM: the server changed the client nonce")
        salt, iterations = base64.b64decode(fields["s"]), int(fields["i"])
        salted = salted_password(self._mech, self._password, salt, iterations)
        cred = credential_from_salted(self._mech, salted, salt, iterations)
        without_proof = f"c=biws,r={nonce}"
        auth = f"{self._bare},{server_first},{without_proof}".encode()
        client_key = hmac_(self._mech, salted, b"Client Key")
        signature = hmac_(self._mech, cred.stored_key, auth)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_signature = hmac_(self._mech, cred.server_key, auth)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


def inter_broker_client_factory(config: BrokerConfig, listener: str) -> Callable[[], SaslClient]:
    """New clients for the broker's connections on a SASL inter-broker listener;
    ValueError (one line) if it cannot log in there."""
    mechanism = config["sasl.mechanism.inter.broker.protocol"]
    if mechanism not in SUPPORTED_MECHANISMS:
        raise ValueError(
            f"sasl.mechanism.inter.broker.protocol={mechanism} on inter-broker listener "
            f"{listener}; Moldau supports {', '.join(SUPPORTED_MECHANISMS)}"
        )
    options = jaas_options(config, listener, mechanism)
    username, password = options.get("username"), options.get("password")
    if not username or not password:
        raise ValueError(
            f"inter-broker listener {listener} uses SASL {mechanism}: its JAAS config "
            f"(listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config) needs "
            "username and password"
        )
    return login_factory(mechanism, username, password)


def login_factory(mechanism: str, username: str, password: str) -> Callable[[], SaslClient]:
    """New clients of one of SUPPORTED_MECHANISMS (one per connection: a SCRAM
    client holds its exchange's state)."""
    if mechanism not in SUPPORTED_MECHANISMS:
        raise ValueError(f"unsupported SASL mechanism {mechanism}")
    scram = ScramMechanism.by_name(mechanism)

    def new() -> SaslClient:
        if scram is None:
            return PlainClient(username, password)
        return ScramClient(scram, username, password)

    return new
