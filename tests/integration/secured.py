"""A broker secured as a shared cluster is: a SASL_SSL listener with SCRAM users
(moldau.testing.sasl.SaslUsers, written before the broker starts), an authorizer
allowing nothing without an ACL, and a PLAINTEXT listener for the operator
(User:ANONYMOUS is a super user) that sets up ACLs. For the tests of clients'
security settings (tools, Spark)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from moldau.testing.certs import Certificates
from moldau.testing.process import BrokerProcess
from moldau.testing.sasl import SaslUsers

#: A SCRAM user: (the mechanism its client logs in with, password).
User = tuple[str, str]


@dataclass(frozen=True)
class SecuredBroker:
    broker: BrokerProcess
    users: Mapping[str, User]

    @property
    def sasl_ssl(self) -> str:
        """The SASL_SSL listener's address."""
        return self.broker.sasl_bootstrap

    def client_settings(self, user: str, **overrides: str) -> dict[str, str]:
        """librdkafka's settings for `user` on the SASL_SSL listener, but its address."""
        conf = self.broker.sasl_client_config(user, self.users[user][0])
        del conf["bootstrap.servers"]
        return conf | overrides


def allow(principal: str, rt: ResourceType, name: str, op: AclOperation) -> AclBinding:
    """An ALLOW from any host: the cluster by its name, anything else by prefix."""
    pattern = (
        ResourcePatternType.LITERAL if rt == ResourceType.BROKER else ResourcePatternType.PREFIXED
    )
    return AclBinding(rt, name, pattern, principal, "*", op, AclPermissionType.ALLOW)


@contextmanager
def secured_broker(
    directory: Path,
    users: Mapping[str, User],
    admin: str = "admin",
    grants: Iterable[AclBinding] = (),
) -> Iterator[SecuredBroker]:
    """The broker with `users`, `admin` (one of them) a super user and `grants` in
    force; killed on exit."""
    sasl = SaslUsers(
        {name: password for name, (_, password) in users.items()},
        mechanisms=tuple(sorted({mechanism for mechanism, _ in users.values()})),
        admin=admin,
        inter_broker_mechanism=users[admin][0],
    )
    overrides = {
        # No SSL listener: the operator's PLAINTEXT one and the clients' SASL_SSL one.
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": f"User:ANONYMOUS;User:{admin}",
        "allow.everyone.if.no.acl.found": "false",
        # A test's consumer group forms at once rather than after 3 s.
        "group.initial.rebalance.delay.ms": "0",
    }
    certs = Certificates.create(directory / "certs")
    with BrokerProcess(directory / "data", overrides, tls=certs, sasl=sasl) as b:
        bindings = list(grants)
        if bindings:
            operator = AdminClient({"bootstrap.servers": b.bootstrap, "log_level": 0})
            for f in operator.create_acls(bindings).values():
                f.result(10)
        yield SecuredBroker(b, users)
