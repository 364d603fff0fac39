"""What a SASL mechanism looks like to the handlers, and which mechanisms a listener
serves (Kafka's SaslServerAuthenticator choosing a SaslServer per mechanism).

Config, as Kafka: `sasl.enabled.mechanisms` (listener-prefixable as
`listener.name.<l>.sasl.enabled.mechanisms`); PLAIN's users from
`listener.name.<l>.plain.sasl.jaas.config`, else `sasl.jaas.config`."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol

from moldau.security import plain
from moldau.security.credentials import SCRAM_MECHANISMS, CredentialCache, ScramMechanism
from moldau.security.jaas import parse_single
from moldau.security.scram import ScramServer

if TYPE_CHECKING:
    from moldau.config.broker import BrokerConfig

SUPPORTED_MECHANISMS = (plain.MECHANISM, *SCRAM_MECHANISMS)


class SaslServer(Protocol):
    mechanism: str

    def evaluate(self, token: bytes) -> bytes:
        """The challenge or final response for the client's token; raises
        SaslAuthenticationFailedError on a failed login, IllegalSaslStateError when
        the exchange is over."""
        ...

    @property
    def complete(self) -> bool: ...

    @property
    def principal(self) -> str:
        """ "User:<name>" once complete."""
        ...


def enabled_mechanisms(config: BrokerConfig, listener: str) -> list[str]:
    value = config.for_listener(listener, "sasl.enabled.mechanisms")
    return [m.strip() for m in value if m.strip()] if value else []


def jaas_options(config: BrokerConfig, listener: str, mechanism: str) -> dict[str, str]:
    """The options of the listener's login module for `mechanism` ({} if none)."""
    text = config.raw.get(f"{listener_prefix(listener)}{mechanism.lower()}.sasl.jaas.config")
    if text is None:
        text = config["sasl.jaas.config"]
    return dict(parse_single(text).options) if text else {}


def listener_prefix(listener: str) -> str:
    """Kafka's ListenerName.configPrefix: the name in lower case."""
    return f"listener.name.{listener.lower()}."


def sasl_server_factory(
    config: BrokerConfig, listener: str, credentials: CredentialCache
) -> Callable[[str], SaslServer | None]:
    enabled = set(enabled_mechanisms(config, listener))
    # PLAIN's users are read once per listener (Kafka reads its JAAS at start too).
    plain_users = (
        plain.users_from_jaas(jaas_options(config, listener, plain.MECHANISM))
        if plain.MECHANISM in enabled
        else {}
    )

    def new(mechanism: str) -> SaslServer | None:
        if mechanism not in enabled:
            return None
        if mechanism == plain.MECHANISM:
            return plain.PlainServer(plain_users)
        scram = ScramMechanism.by_name(mechanism)
        return None if scram is None else ScramServer(scram, credentials)

    return new


def check_mechanisms(config: BrokerConfig, sasl_listeners: Iterable[str]) -> None:
    """Refuse to start (ValueError, one line) when a SASL listener enables a mechanism
    Moldau cannot serve: Kafka's default GSSAPI (Kerberos) or OAUTHBEARER."""
    for listener in sasl_listeners:
        enabled = enabled_mechanisms(config, listener)
        unsupported = [m for m in enabled if m not in SUPPORTED_MECHANISMS]
        if unsupported:
            raise ValueError(
                f"Listener {listener} enables SASL mechanism(s) {', '.join(unsupported)} "
                f"(sasl.enabled.mechanisms); Moldau supports {', '.join(SUPPORTED_MECHANISMS)}"
            )
        if not enabled:
            raise ValueError(
                f"Listener {listener} is a SASL listener with no sasl.enabled.mechanisms; "
                f"Moldau supports {', '.join(SUPPORTED_MECHANISMS)}"
            )
        if plain.MECHANISM in enabled:
            try:
                options = jaas_options(config, listener, plain.MECHANISM)
            except ValueError as e:
                raise ValueError(f"Listener {listener}: {e}") from None
            if not plain.users_from_jaas(options):
                raise ValueError(
                    f"Listener {listener} enables PLAIN but no JAAS config names its users: "
                    f"set {listener_prefix(listener)}plain.sasl.jaas.config with "
                    'user_<name>="<password>" entries'
                )
