"""Listeners as Kafka names them: `NAME://host:port`, each name mapped to a
security protocol by listener.security.protocol.map, and the one brokers use to
reach each other (inter.broker.listener.name or security.inter.broker.protocol).
Pure: a config in, listeners out (InvalidConfigError with one clear line)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from moldau.protocol.errors import InvalidConfigError

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
TLS_PROTOCOLS = frozenset({"SSL", "SASL_SSL"})
SASL_PROTOCOLS = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})


@dataclass(frozen=True, slots=True)
class Listener:
    name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    @property
    def tls(self) -> bool:
        return self.security_protocol in TLS_PROTOCOLS

    @property
    def sasl(self) -> bool:
        return self.security_protocol in SASL_PROTOCOLS


def parse_protocol_map(entries: Iterable[str]) -> dict[str, str]:
    """listener.security.protocol.map: `NAME:PROTOCOL` pairs, names upper-cased as
    Kafka's ListenerName normalises them."""
    out: dict[str, str] = {}
    for entry in entries:
        name, sep, protocol = entry.strip().partition(":")
        protocol = protocol.strip().upper()
        if not sep or not name.strip():
            raise InvalidConfigError(
                f"Invalid listener.security.protocol.map entry {entry!r}: expected NAME:PROTOCOL"
            )
        if protocol not in SECURITY_PROTOCOLS:
            raise InvalidConfigError(
                f"listener.security.protocol.map: unknown security protocol {protocol!r} "
                f"for {name.strip()} (one of {', '.join(SECURITY_PROTOCOLS)})"
            )
        out[name.strip().upper()] = protocol
    return out


def parse_listeners(values: Iterable[str], protocol_map: dict[str, str]) -> list[Listener]:
    """`NAME://host:port` entries (an empty host binds every interface)."""
    out = []
    for value in values:
        name, sep, rest = value.strip().partition("://")
        host, colon, port = rest.rpartition(":")
        if not sep or not colon or not port.isdigit() or not name:
            raise InvalidConfigError(f"Invalid listener {value!r}: expected NAME://host:port")
        name = name.upper()
        protocol = protocol_map.get(name)
        if protocol is None:
            raise InvalidConfigError(
                f"Listener {value!r}: no security protocol for {name} in "
                "listener.security.protocol.map"
            )
        out.append(Listener(name, host.strip("[]"), int(port), protocol))
    if len({listener.name for listener in out}) != len(out):
        raise InvalidConfigError("Each listener must have a distinct name")
    return out


def broker_listeners(config: Any) -> list[Listener]:
    """The `listeners` of a BrokerConfig (anything indexable by key)."""
    listeners = parse_listeners(
        config["listeners"], parse_protocol_map(config["listener.security.protocol.map"])
    )
    if not listeners:
        raise InvalidConfigError("listeners must name at least one listener")
    return listeners


def advertised_listeners(config: Any) -> list[Listener] | None:
    """advertised.listeners, each name one of `listeners` (as Kafka requires)."""
    if not config["advertised.listeners"]:
        return None
    names = {listener.name for listener in broker_listeners(config)}
    out = parse_listeners(
        config["advertised.listeners"],
        parse_protocol_map(config["listener.security.protocol.map"]),
    )
    for listener in out:
        if listener.name not in names:
            raise InvalidConfigError(
                f"advertised.listeners names {listener.name}, which is not in listeners"
            )
    return out


def inter_broker_listener(config: Any, listeners: list[Listener]) -> Listener:
    """The listener brokers reach each other on: inter.broker.listener.name, or the
    listener named after security.inter.broker.protocol (Kafka: only one of them
    may be set), else the first listener (Moldau's default before listener names)."""
    name = config["inter.broker.listener.name"]
    protocol = config["security.inter.broker.protocol"]
    if name and protocol:
        raise InvalidConfigError(
            "Only one of inter.broker.listener.name and security.inter.broker.protocol may be set"
        )
    wanted = (name or protocol or "").upper()
    if not wanted:
        return listeners[0]
    for listener in listeners:
        if listener.name == wanted:
            return listener
    key = "inter.broker.listener.name" if name else "security.inter.broker.protocol"
    raise InvalidConfigError(
        f"{key}={wanted} must be one of the listeners "
        f"({', '.join(listener.name for listener in listeners)})"
    )
