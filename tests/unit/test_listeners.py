"""Listeners as a Kafka user writes them: names mapped to security protocols, the
inter-broker listener, and one clear error for each mistake."""

from __future__ import annotations

import pytest

from moldau.config.broker import BrokerConfig
from moldau.protocol.errors import InvalidConfigError
from moldau.security.listeners import (
    Listener,
    advertised_listeners,
    broker_listeners,
    inter_broker_listener,
)


def listeners_of(**props: str) -> list[Listener]:
    return broker_listeners(BrokerConfig({k.replace("_", "."): v for k, v in props.items()}))


def test_kafka_default_map_gives_each_standard_name_its_protocol() -> None:
    found = listeners_of(
        listeners="PLAINTEXT://:9092,SSL://127.0.0.1:9093,sasl_ssl://[::1]:9094,"
        "SASL_PLAINTEXT://h:9095"
    )
    assert found == [
        Listener("PLAINTEXT", "", 9092, "PLAINTEXT"),
        Listener("SSL", "127.0.0.1", 9093, "SSL"),
        Listener("SASL_SSL", "::1", 9094, "SASL_SSL"),
        Listener("SASL_PLAINTEXT", "h", 9095, "SASL_PLAINTEXT"),
    ]
    assert [(lis.tls, lis.sasl) for lis in found] == [
        (False, False), (True, False), (True, True), (False, True),
    ]  # fmt: skip


def test_custom_names_need_the_map() -> None:
    config = BrokerConfig({
        "listeners": "INTERNAL://:9092,EXTERNAL://:9093",
        "listener.security.protocol.map": "INTERNAL:SSL,EXTERNAL:SASL_SSL",
    })  # fmt: skip
    assert [lis.security_protocol for lis in broker_listeners(config)] == ["SSL", "SASL_SSL"]
    with pytest.raises(InvalidConfigError, match="no security protocol for INTERNAL"):
        listeners_of(listeners="INTERNAL://:9092")


@pytest.mark.parametrize(
    ("props", "error"),
    [
        ({"listeners": "PLAINTEXT:9092"}, "expected NAME://host:port"),
        ({"listeners": "PLAINTEXT://:9092,PLAINTEXT://:9093"}, "distinct name"),
        ({"listener.security.protocol.map": "A:TLS"}, "unknown security protocol 'TLS'"),
        ({"listener.security.protocol.map": "A"}, "expected NAME:PROTOCOL"),
    ],
)
def test_mistakes_are_one_clear_error(props: dict[str, str], error: str) -> None:
    with pytest.raises(InvalidConfigError, match=error):
        broker_listeners(BrokerConfig(props))


def test_inter_broker_listener_by_name_by_protocol_or_the_first() -> None:
    two = "PLAINTEXT://:9092,SSL://:9093"
    for props, expected in [
        ({"listeners": two}, "PLAINTEXT"),
        ({"listeners": two, "inter.broker.listener.name": "ssl"}, "SSL"),
        ({"listeners": two, "security.inter.broker.protocol": "SSL"}, "SSL"),
    ]:
        config = BrokerConfig(props)
        assert inter_broker_listener(config, broker_listeners(config)).name == expected
    both = BrokerConfig({
        "listeners": two, "inter.broker.listener.name": "SSL",
        "security.inter.broker.protocol": "SSL",
    })  # fmt: skip
    with pytest.raises(InvalidConfigError, match="Only one of"):
        inter_broker_listener(both, broker_listeners(both))
    missing = BrokerConfig({"listeners": two, "inter.broker.listener.name": "SASL_SSL"})
    with pytest.raises(InvalidConfigError, match="must be one of the listeners"):
        inter_broker_listener(missing, broker_listeners(missing))


def test_advertised_listeners_must_be_listeners() -> None:
    config = BrokerConfig({
        "listeners": "PLAINTEXT://:9092,SSL://:9093",
        "advertised.listeners": "SSL://broker.example:19093",
    })  # fmt: skip
    assert advertised_listeners(config) == [Listener("SSL", "broker.example", 19093, "SSL")]
    bad = BrokerConfig({"listeners": "SSL://:9093", "advertised.listeners": "PLAINTEXT://h:1"})
    with pytest.raises(InvalidConfigError, match="not in listeners"):
        advertised_listeners(bad)


def test_per_listener_ssl_config_overrides_the_broker_wide_one() -> None:
    config = BrokerConfig({
        "ssl.client.auth": "none",
        "listener.name.internal.ssl.client.auth": "required",
    })  # fmt: skip
    assert config.for_listener("INTERNAL", "ssl.client.auth") == "required"
    assert config.for_listener("EXTERNAL", "ssl.client.auth") == "none"
    with pytest.raises(InvalidConfigError):
        BrokerConfig({"listener.name.x.ssl.client.auth": "maybe"}).for_listener(
            "X", "ssl.client.auth"
        )
