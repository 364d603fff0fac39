"""JAAS config parsing, sasl.* broker configs, and the per-listener mechanism factory."""

from __future__ import annotations

import pytest

from moldau.config.broker import BrokerConfig
from moldau.protocol.errors import SaslAuthenticationFailedError
from moldau.security.credentials import CredentialCache, ScramMechanism, new_credential
from moldau.security.jaas import LoginModule, parse_jaas, parse_single
from moldau.security.plain import PlainServer
from moldau.security.sasl import (
    check_mechanisms,
    enabled_mechanisms,
    jaas_options,
    sasl_server_factory,
)
from moldau.security.scram import ScramServer

PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" '
    'user_admin="admin-secret" user_alice="alice \\"quoted\\" pw";'
)


def test_jaas_single_module_with_quoted_options() -> None:
    module = parse_single(PLAIN_JAAS)
    assert module == LoginModule(
        "org.apache.kafka.common.security.plain.PlainLoginModule",
        "required",
        {
            "username": "admin",
            "password": "admin-secret",
            "user_admin": "admin-secret",
            "user_alice": 'alice "quoted" pw',
        },
    )


def test_jaas_several_modules_comments_and_flags() -> None:
    text = """
        // a comment
        a.B required x=1;  /* another */
        c.D OPTIONAL y="two words" z=3 ;
    """
    modules = parse_jaas(text)
    assert [(m.name, m.flag, m.options) for m in modules] == [
        ("a.B", "required", {"x": "1"}),
        ("c.D", "optional", {"y": "two words", "z": "3"}),
    ]
    with pytest.raises(ValueError, match="2 login modules, should be 1"):
        parse_single(text)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "no login module"),
        ("a.B required x=1", "';'"),
        ("a.B mandatory;", "invalid control flag"),
        ('a.B required x="unterminated;', "unterminated"),
        ("a.B required x=;", "a value for x"),
        ("a.B required x 1;", "'=' after x"),
        ("a.B required; /* open", "unterminated comment"),
    ],
)
def test_jaas_errors_say_what_is_wrong(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_jaas(text)


def test_listener_prefixed_keys_override_the_broker_wide_ones() -> None:
    config = BrokerConfig(
        {
            "sasl.enabled.mechanisms": "SCRAM-SHA-256",
            "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        }
    )
    assert enabled_mechanisms(config, "SASL_PLAINTEXT") == ["PLAIN", "SCRAM-SHA-512"]
    assert enabled_mechanisms(config, "OTHER") == ["SCRAM-SHA-256"]
    assert jaas_options(config, "SASL_PLAINTEXT", "PLAIN")["user_admin"] == "admin-secret"
    assert jaas_options(config, "OTHER", "PLAIN") == {}


def test_kafka_defaults() -> None:
    config = BrokerConfig()
    assert config["sasl.enabled.mechanisms"] == ["GSSAPI"]
    assert config["sasl.mechanism.inter.broker.protocol"] == "GSSAPI"
    assert config["connections.max.reauth.ms"] == 0
    assert config["connection.failed.authentication.delay.ms"] == 100


def test_sasl_jaas_config_is_the_fallback_for_plain() -> None:
    config = BrokerConfig({"sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": PLAIN_JAAS})
    new = sasl_server_factory(config, "SASL_PLAINTEXT", CredentialCache())
    server = new("PLAIN")
    assert isinstance(server, PlainServer)
    server.evaluate(b'\0alice\0alice "quoted" pw')
    assert server.principal == "User:alice"


def test_factory_serves_only_enabled_mechanisms() -> None:
    cache = CredentialCache()
    cred = new_credential(ScramMechanism.SCRAM_SHA_512, "pw", 4096)
    cache.update_user("bob", {"SCRAM-SHA-512": cred.to_string()})
    config = BrokerConfig({"sasl.enabled.mechanisms": "SCRAM-SHA-512"})
    new = sasl_server_factory(config, "SASL_PLAINTEXT", cache)
    assert new("PLAIN") is None
    assert new("SCRAM-SHA-256") is None
    assert new("GSSAPI") is None
    server = new("SCRAM-SHA-512")
    assert isinstance(server, ScramServer)
    assert server.evaluate(b"n,,n=bob,r=x").startswith(b"r=x")
    # Each login gets its own server: a failed one does not spoil the next.
    other = new("SCRAM-SHA-512")
    assert other is not server
    with pytest.raises(SaslAuthenticationFailedError):
        other.evaluate(b"n,,n=nobody,r=x")


def test_cache_changes_reach_the_factorys_servers() -> None:
    cache = CredentialCache()
    config = BrokerConfig({"sasl.enabled.mechanisms": "SCRAM-SHA-256"})
    new = sasl_server_factory(config, "SASL_PLAINTEXT", cache)
    cred = new_credential(ScramMechanism.SCRAM_SHA_256, "pw", 4096)
    cache.update_user("late", {"SCRAM-SHA-256": cred.to_string()})
    server = new("SCRAM-SHA-256")
    assert server is not None
    assert server.evaluate(b"n,,n=late,r=x").startswith(b"r=x")


@pytest.mark.parametrize(
    ("props", "why"),
    [
        ({}, "GSSAPI"),  # Kafka's default
        ({"sasl.enabled.mechanisms": "PLAIN,OAUTHBEARER", "sasl.jaas.config": PLAIN_JAAS},
         "OAUTHBEARER"),
        ({"sasl.enabled.mechanisms": "PLAIN"}, "no JAAS config names its users"),
        ({"sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": "broken"}, "control flag"),
    ],
)  # fmt: skip
def test_start_up_refuses_what_moldau_cannot_serve(props: dict[str, str], why: str) -> None:
    with pytest.raises(ValueError, match=why) as e:
        check_mechanisms(BrokerConfig(props), ["SASL_PLAINTEXT"])
    assert "\n" not in str(e.value)
    if why in ("GSSAPI", "OAUTHBEARER"):
        assert "Moldau supports PLAIN, SCRAM-SHA-256, SCRAM-SHA-512" in str(e.value)


def test_no_sasl_listener_needs_no_sasl_config() -> None:
    check_mechanisms(BrokerConfig(), [])
    check_mechanisms(BrokerConfig({"sasl.enabled.mechanisms": "SCRAM-SHA-256"}), ["SASL_X"])


def inter_broker_login(config: BrokerConfig) -> object:
    from moldau.security.listeners import broker_listeners, inter_broker_listener
    from moldau.server.broker import inter_broker_authenticator

    listener = inter_broker_listener(config, broker_listeners(config))
    return inter_broker_authenticator(config, listener)


def test_inter_broker_login_needs_an_enabled_mechanism_and_credentials() -> None:
    from moldau.protocol.errors import InvalidConfigError

    base = {"listeners": "SASL_PLAINTEXT://:9093,PLAINTEXT://:9092"}
    assert inter_broker_login(BrokerConfig({"listeners": "PLAINTEXT://:9092"})) is None
    cases = [
        ({"sasl.enabled.mechanisms": "PLAIN"}, "must be in the sasl.enabled.mechanisms"),
        ({"sasl.enabled.mechanisms": "SCRAM-SHA-256",
          "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256"}, "needs username and password"),
    ]  # fmt: skip
    for props, why in cases:
        with pytest.raises(InvalidConfigError, match=why):
            inter_broker_login(BrokerConfig(base | props))
    login = inter_broker_login(
        BrokerConfig(
            base
            | {
                "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
                "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": (
                    "org.apache.kafka.common.security.scram.ScramLoginModule required "
                    'username="broker" password="b-pw";'
                ),
            }
        )
    )
    assert login is not None
