"""moldau.testing.sasl: the server.properties, the /config/users entries and the
client settings that SaslUsers gives a test broker and its clients."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from moldau.config.broker import BrokerConfig
from moldau.metadata.client import MetadataClient
from moldau.metadata.embedded import EmbeddedTree
from moldau.security.credentials import ScramCredential, ScramMechanism, new_credential
from moldau.security.plain import users_from_jaas
from moldau.security.sasl import jaas_options
from moldau.security.sasl_client import inter_broker_client_factory
from moldau.testing.sasl import SaslUsers, write_scram_users_offline

USERS = SaslUsers({"admin": "admin-secret", "alice": 'a"li\\ce'})


def test_broker_properties_name_the_users_and_the_inter_broker_login() -> None:
    props = USERS.broker_properties("SASL_SSL")
    assert props["sasl.enabled.mechanisms"] == "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
    assert props["sasl.mechanism.inter.broker.protocol"] == "SCRAM-SHA-512"
    assert props["super.users"] == "User:admin"
    config = BrokerConfig(props | {"listeners": "SASL_SSL://127.0.0.1:0"})
    # PLAIN's users, quotes and backslashes intact, as the broker parses them.
    plain = jaas_options(config, "SASL_SSL", "PLAIN")
    assert users_from_jaas(plain) == {"admin": "admin-secret", "alice": 'a"li\\ce'}
    scram = jaas_options(config, "SASL_SSL", "SCRAM-SHA-512")
    assert (scram["username"], scram["password"]) == ("admin", "admin-secret")
    assert inter_broker_client_factory(config, "SASL_SSL")().mechanism == "SCRAM-SHA-512"


def test_a_wrong_inter_broker_password_changes_only_the_brokers_login() -> None:
    wrong = USERS.with_inter_broker_password("nope")
    props = wrong.broker_properties("SASL_PLAINTEXT")
    config = BrokerConfig(props | {"listeners": "SASL_PLAINTEXT://127.0.0.1:0"})
    assert jaas_options(config, "SASL_PLAINTEXT", "SCRAM-SHA-512")["password"] == "nope"
    assert users_from_jaas(jaas_options(config, "SASL_PLAINTEXT", "PLAIN"))["admin"] == (
        "admin-secret"
    )
    assert wrong.scram_configs().keys() == USERS.scram_configs().keys()


def test_scram_configs_hold_credentials_of_the_passwords() -> None:
    configs = SaslUsers({"admin": "pw"}, iterations=4096).scram_configs()
    assert set(configs["admin"]) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
    for name, text in configs["admin"].items():
        mech = ScramMechanism.by_name(name)
        assert mech is not None
        stored = ScramCredential.from_string(text)
        assert stored.iterations == 4096
        assert new_credential(mech, "pw", 4096, stored.salt) == stored
        assert new_credential(mech, "other", 4096, stored.salt) != stored
    assert (
        SaslUsers({"admin": "pw"}, ("PLAIN",), inter_broker_mechanism="PLAIN").scram_configs() == {}
    )


def test_client_config() -> None:
    assert USERS.client_config("h:1", "alice", "PLAIN") == {
        "bootstrap.servers": "h:1", "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": 'a"li\\ce',
    }  # fmt: skip
    tls = USERS.client_config("h:1", ca=Path("/c/ca.pem"))
    assert tls["security.protocol"] == "SASL_SSL" and tls["ssl.ca.location"] == "/c/ca.pem"
    assert (tls["sasl.username"], tls["sasl.mechanism"]) == ("admin", "SCRAM-SHA-512")
    with pytest.raises(ValueError, match="not enabled"):
        SaslUsers(mechanisms=("PLAIN",), inter_broker_mechanism="PLAIN").client_config(
            "h:1", mechanism="SCRAM-SHA-256"
        )


def test_bad_users_are_refused() -> None:
    with pytest.raises(ValueError, match="admin user"):
        SaslUsers({"alice": "pw"})
    with pytest.raises(ValueError, match="GSSAPI"):
        SaslUsers(mechanisms=("GSSAPI",))
    with pytest.raises(ValueError, match="must be one of"):
        SaslUsers(mechanisms=("PLAIN",))


def test_users_written_offline_are_in_the_store_a_broker_opens(tmp_path: Path) -> None:
    write_scram_users_offline(tmp_path / "meta", USERS)
    tree = EmbeddedTree(tmp_path / "meta")

    async def read() -> dict[str, dict[str, str]]:
        session = tree.session()
        await session.start()
        client = MetadataClient(session)
        return {u: await client.get_user_config(u) for u in await client.get_config_users()}

    try:
        found = asyncio.run(read())
    finally:
        tree.close()
    assert set(found) == {"admin", "alice"}
    assert set(found["alice"]) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
