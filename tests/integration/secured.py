"""A broker secured as a shared cluster is: a SASL_SSL listener with SCRAM users, an
authorizer allowing nothing without an ACL, and a PLAINTEXT listener for the
operator (User:ANONYMOUS is a super user) that sets up users and ACLs. For the tests
of clients' security settings (tools, Spark); SC's moldau.testing SASL support may
take this over."""

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
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from moldau.testing.certs import Certificates
from moldau.testing.process import BrokerProcess

#: A SCRAM user: (mechanism, password).
User = tuple[str, str]


@dataclass(frozen=True)
class SecuredBroker:
    broker: BrokerProcess
    certs: Certificates
    users: Mapping[str, User]

    @property
    def sasl_ssl(self) -> str:
        """The SASL_SSL listener's address."""
        return f"127.0.0.1:{self.broker.listener_ports['SASL_SSL']}"

    def client_settings(self, user: str, **overrides: str) -> dict[str, str]:
        """librdkafka's settings for `user` on the SASL_SSL listener."""
        mechanism, password = self.users[user]
        return {
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(self.certs.ca),
            "sasl.mechanism": mechanism,
            "sasl.username": user,
            "sasl.password": password,
        } | overrides


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
    super_users: Iterable[str] = (),
    grants: Iterable[AclBinding] = (),
) -> Iterator[SecuredBroker]:
    """The broker with `users` created, `super_users` (names) and `grants` in force;
    killed on exit."""
    certs = Certificates.create(directory / "certs")
    mechanisms = sorted({mechanism for mechanism, _ in users.values()})
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "sasl.enabled.mechanisms": ",".join(mechanisms),
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": ";".join(["User:ANONYMOUS", *(f"User:{u}" for u in super_users)]),
        "allow.everyone.if.no.acl.found": "false",
    }
    with BrokerProcess(directory / "data", overrides, tls=certs) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap, "log_level": 0})
        upserts = [
            UserScramCredentialUpsertion(
                name, ScramCredentialInfo(ScramMechanism[mechanism.replace("-", "_")], 4096),
                password.encode(),
            )
            for name, (mechanism, password) in users.items()
        ]  # fmt: skip
        for f in admin.alter_user_scram_credentials(upserts).values():
            f.result(10)
        bindings = list(grants)
        if bindings:
            for f in admin.create_acls(bindings).values():
                f.result(10)
        yield SecuredBroker(b, certs, users)
