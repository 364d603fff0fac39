"""SASL users for test brokers and clusters: who may log in, with which mechanisms,
who the super user is, and how brokers log in to each other; what a broker's
server.properties need for it, and a client's librdkafka settings.

    users = SaslUsers({"admin": "admin-secret", "alice": "alice-secret"})
    with Cluster(tmp_path, 3, tls=certs, sasl=users, inter_broker_listener="SASL_SSL") as c:
        Producer(c.sasl_client_config("alice", "SCRAM-SHA-256"))

PLAIN's users are the listener's JAAS `user_<name>` entries; SCRAM's are written to
/config/users/<user> (Kafka's format) before any broker starts, since brokers that
log in to each other with SCRAM need their own credential from the first
connection: on ZooKeeper by `Cluster`, in the embedded store by `LocalCluster`
and by `BrokerProcess` (into its data directory's store, before its first start).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from moldau.metadata.client import MetadataClient
from moldau.metadata.embedded import EmbeddedTree
from moldau.metadata.store import MetadataStore
from moldau.security.credentials import ScramMechanism, new_credential

if TYPE_CHECKING:  # cryptography is a test extra: only for tests with TLS
    from moldau.testing.certs import Certificates

PLAIN = "PLAIN"
_PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
_SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass(frozen=True)
class SaslUsers:
    """`users`: name -> password, every one a PLAIN user and a SCRAM user of each
    SCRAM mechanism enabled. `admin` is a super user (super.users) and the user
    brokers log in to each other as, with `inter_broker_mechanism`; with
    `inter_broker_password` set, brokers log in with that password instead of the
    admin's own (a broker that cannot join)."""

    users: Mapping[str, str] = field(default_factory=lambda: {"admin": "admin-secret"})
    mechanisms: tuple[str, ...] = (PLAIN, "SCRAM-SHA-256", "SCRAM-SHA-512")
    admin: str = "admin"
    inter_broker_mechanism: str = "SCRAM-SHA-512"
    iterations: int = 4096
    inter_broker_password: str | None = None

    def __post_init__(self) -> None:
        if self.admin not in self.users:
            raise ValueError(f"the admin user {self.admin!r} needs a password in `users`")
        unknown = [m for m in self.mechanisms if m != PLAIN and ScramMechanism.by_name(m) is None]
        if unknown:
            raise ValueError(f"unknown SASL mechanisms {unknown}: PLAIN, SCRAM-SHA-256/512")
        if self.inter_broker_mechanism not in self.mechanisms:
            raise ValueError(f"{self.inter_broker_mechanism} must be one of {self.mechanisms}")

    def with_inter_broker_password(self, password: str) -> SaslUsers:
        """The same users, brokers logging in with `password`."""
        return replace(self, inter_broker_password=password)

    @staticmethod
    def listener(tls: bool) -> str:
        """The SASL listener's name (and protocol): SASL_SSL over TLS."""
        return "SASL_SSL" if tls else "SASL_PLAINTEXT"

    @property
    def scram_mechanisms(self) -> list[ScramMechanism]:
        found = (ScramMechanism.by_name(m) for m in self.mechanisms)
        return [m for m in found if m is not None]

    def broker_properties(self, listener: str) -> dict[str, str]:
        """The sasl.* server.properties of a broker whose listener `listener` takes
        these users (and which is the inter-broker listener if the broker says so)."""
        prefix = f"listener.name.{listener.lower()}."
        login = {
            "username": self.admin,
            "password": self.inter_broker_password or self.users[self.admin],
        }
        props = {
            "sasl.enabled.mechanisms": ",".join(self.mechanisms),
            "sasl.mechanism.inter.broker.protocol": self.inter_broker_mechanism,
            "super.users": f"User:{self.admin}",
        }
        if PLAIN in self.mechanisms:
            entries = [f"{k}={_quoted(v)}" for k, v in login.items()]
            entries += [f"user_{u}={_quoted(p)}" for u, p in self.users.items()]
            props[f"{prefix}plain.sasl.jaas.config"] = (
                f"{_PLAIN_MODULE} required {' '.join(entries)};"
            )
        for mech in self.scram_mechanisms:
            entries = [f"{k}={_quoted(v)}" for k, v in login.items()]
            props[f"{prefix}{mech.mechanism_name.lower()}.sasl.jaas.config"] = (
                f"{_SCRAM_MODULE} required {' '.join(entries)};"
            )
        return props

    def scram_configs(self) -> dict[str, dict[str, str]]:
        """Each user's /config/users entry: SCRAM mechanism -> Kafka's credential string."""
        return {
            user: {
                m.mechanism_name: new_credential(m, password, self.iterations).to_string()
                for m in self.scram_mechanisms
            }
            for user, password in self.users.items()
            if self.scram_mechanisms
        }

    def client_config(
        self,
        bootstrap: str,
        user: str | None = None,
        mechanism: str | None = None,
        ca: Path | None = None,
    ) -> dict[str, str]:
        """librdkafka's settings for `user` (default: the admin) logging in with
        `mechanism` (default: the inter-broker one); `ca`: over TLS, trusting it."""
        user = user or self.admin
        mechanism = mechanism or self.inter_broker_mechanism
        if mechanism not in self.mechanisms:
            raise ValueError(f"{mechanism} is not enabled here: {', '.join(self.mechanisms)}")
        conf = {
            "bootstrap.servers": bootstrap,
            "security.protocol": self.listener(ca is not None),
            "sasl.mechanism": mechanism,
            "sasl.username": user,
            "sasl.password": self.users[user],
        }
        if ca is not None:
            conf["ssl.ca.location"] = str(ca)
        return conf


class SaslListener:
    """What BrokerProcess, Cluster and LocalCluster started with `sasl=` offer
    their clients: `sasl_bootstrap`, and librdkafka's settings to reach it."""

    sasl: SaslUsers | None
    tls: Certificates | None

    @property
    def sasl_bootstrap(self) -> str:
        raise NotImplementedError

    def sasl_client_config(
        self, user: str | None = None, mechanism: str | None = None
    ) -> dict[str, str]:
        """librdkafka's settings to reach the SASL listener(s) as `user` (default:
        the admin) with `mechanism` (default: the inter-broker one)."""
        assert self.sasl is not None, "started without sasl="
        ca = None if self.tls is None else self.tls.ca
        return self.sasl.client_config(self.sasl_bootstrap, user, mechanism, ca)


async def write_scram_users(store: MetadataStore, users: SaslUsers) -> None:
    """Write every user's SCRAM credentials to /config/users, as kafka-configs'
    --zookeeper form does (with a change notification for brokers that run)."""
    client = MetadataClient(store)
    await client.create_top_level_paths()
    for user, config in users.scram_configs().items():
        await client.set_user_config(user, config)


def write_scram_users_offline(metadata_dir: Path, users: SaslUsers) -> None:
    """Into an embedded store on disk that no broker has open (before it starts)."""
    tree = EmbeddedTree(metadata_dir)

    async def write() -> None:
        session = tree.session()
        await session.start()
        try:
            await write_scram_users(session, users)
        finally:
            await session.close()

    try:
        asyncio.run(write())
    finally:
        tree.close()
