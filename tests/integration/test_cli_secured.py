"""`moldau` client commands against a secured broker, each given its client settings
file (--command-config, or Kafka's own flag for it): a SASL_SSL listener with SCRAM
and an authorizer allowing nothing without an ACL. The raw-request tools
(`transactions`, `reassign-partitions`) run as a SCRAM user holding only the ACLs
they need, so their requests go over TLS with that login; a wrong password or a
mechanism they cannot speak is one line and a non-zero exit.

The broker's PLAINTEXT listener is the operator's (User:ANONYMOUS is a super user):
it sets up users, ACLs and open transactions."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from moldau.testing.certs import Certificates
from moldau.testing.process import BrokerProcess

pytestmark = pytest.mark.integration

TOOLS_USER, TOOLS_PASSWORD = "tools", "tools-secret"
ADMIN_USER, ADMIN_PASSWORD = "admin", "admin-secret"
PREFIX = "sec-"


@dataclass(frozen=True)
class Secured:
    broker: BrokerProcess
    certs: Certificates
    sasl_ssl: str  # the SASL_SSL listener's address
    directory: Path

    def config_file(self, name: str, **settings: str) -> Path:
        """A client properties file for the SASL_SSL listener (librdkafka names)."""
        base = {
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(self.certs.ca),
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": TOOLS_USER,
            "sasl.password": TOOLS_PASSWORD,
        }
        path = self.directory / f"{name}.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in (base | settings).items()))
        return path


def _allow(principal: str, rt: ResourceType, name: str, op: AclOperation) -> AclBinding:
    pattern = (
        ResourcePatternType.LITERAL if rt == ResourceType.BROKER else ResourcePatternType.PREFIXED
    )
    return AclBinding(rt, name, pattern, principal, "*", op, AclPermissionType.ALLOW)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    directory = tmp_path_factory.mktemp("secured")
    certs = Certificates.create(directory / "certs")
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": f"User:ANONYMOUS;User:{ADMIN_USER}",
        "allow.everyone.if.no.acl.found": "false",
    }
    with BrokerProcess(directory / "data", overrides, tls=certs) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap, "log_level": 0})
        upserts = [
            UserScramCredentialUpsertion(
                TOOLS_USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                TOOLS_PASSWORD.encode(),
            ),
            UserScramCredentialUpsertion(
                ADMIN_USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                ADMIN_PASSWORD.encode(),
            ),
        ]  # fmt: skip
        for f in admin.alter_user_scram_credentials(upserts).values():
            f.result(10)
        # What kafka-transactions.sh and kafka-reassign-partitions.sh need, no more.
        tools = f"User:{TOOLS_USER}"
        grants = [
            _allow(tools, ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE),
            _allow(tools, ResourceType.BROKER, "kafka-cluster", AclOperation.ALTER),
            # --verify lifts the reassignment's throttles.
            _allow(tools, ResourceType.BROKER, "kafka-cluster", AclOperation.ALTER_CONFIGS),
            # WriteTxnMarkers (abort) is a broker's request: CLUSTER_ACTION, as in Kafka.
            _allow(tools, ResourceType.BROKER, "kafka-cluster", AclOperation.CLUSTER_ACTION),
            _allow(tools, ResourceType.TOPIC, PREFIX, AclOperation.READ),
            _allow(tools, ResourceType.TOPIC, PREFIX, AclOperation.ALTER_CONFIGS),
            _allow(tools, ResourceType.TRANSACTIONAL_ID, PREFIX, AclOperation.DESCRIBE),
        ]
        for f in admin.create_acls(grants).values():
            f.result(10)
        yield Secured(b, certs, f"127.0.0.1:{b.listener_ports['SASL_SSL']}", directory)


def _name(prefix: str) -> str:
    return f"{PREFIX}{prefix}-{uuid.uuid4().hex[:8]}"


def moldau(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "moldau", *argv],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def ok(*argv: str) -> str:
    result = moldau(*argv)
    assert result.returncode == 0, result.stderr
    return result.stdout


def one_line_failure(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def start_offsets(table: str) -> list[str]:
    """The CurrentTransactionStartOffset column of describe-producers' table."""
    header, *rows = (line.split() for line in table.splitlines())
    column = header.index("CurrentTransactionStartOffset")
    return [row[column] for row in rows]


@pytest.fixture(scope="module")
def open_transaction(secured: Secured) -> Iterator[tuple[str, str]]:
    """(topic, transactional id) of a transaction left open after 3 records at 0-2."""
    topic, tid = _name("txn"), _name("tx")
    admin = AdminClient({"bootstrap.servers": secured.broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    p = Producer({"bootstrap.servers": secured.broker.bootstrap, "transactional.id": tid,
                  "log_level": 0})  # fmt: skip
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, b"v%d" % i, partition=0)
    assert p.flush(30) == 0
    yield topic, tid


def test_transactions_over_sasl_ssl_as_a_scram_user_with_its_acls(
    secured: Secured, open_transaction: tuple[str, str]
) -> None:
    topic, tid = open_transaction
    conf = str(secured.config_file("tools"))
    txn = ["transactions", "--bootstrap-server", secured.sasl_ssl, "--command-config", conf]
    assert tid in ok(*txn, "list")
    described = ok(*txn, "describe", "--transactional-id", tid)
    assert "Ongoing" in described and f"{topic}-0" in described
    describe_producers = [*txn, "describe-producers", "--topic", topic, "--partition", "0"]
    assert start_offsets(ok(*describe_producers)) == ["0"]  # its transaction's
    hanging = ok(*txn, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0")
    assert len(hanging.splitlines()) == 1  # its coordinator still runs it: not hanging
    ok(*txn, "abort", "--topic", topic, "--partition", "0", "--start-offset", "0")
    assert start_offsets(ok(*describe_producers)) == ["None"]


def test_reassign_partitions_over_sasl_ssl_as_a_scram_user_with_its_acls(
    secured: Secured, tmp_path: Path
) -> None:
    topic = _name("move")
    admin = AdminClient({"bootstrap.servers": secured.broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [1]}]}
        )
    )
    conf = str(secured.config_file("tools"))
    tool = ["reassign-partitions", "--bootstrap-server", secured.sasl_ssl, "--command-config", conf]
    assert "Successfully started" in ok(*tool, "--execute", "--reassignment-json-file", str(plan))
    assert "is completed" in ok(*tool, "--verify", "--reassignment-json-file", str(plan))


@pytest.mark.parametrize(
    "tool",
    [
        ["transactions", "list"],
        ["reassign-partitions", "--verify", "--reassignment-json-file", "PLAN"],
    ],
)
def test_a_wrong_password_is_one_line_and_a_non_zero_exit(
    secured: Secured, tmp_path: Path, tool: list[str]
) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(
        '{"version": 1, "partitions": [{"topic": "x", "partition": 0, "replicas": [1]}]}'
    )
    conf = str(secured.config_file("wrong", **{"sasl.password": "not-it"}))
    argv = [a.replace("PLAN", str(plan)) for a in tool]
    line = one_line_failure(
        moldau(
            *argv[:1], "--bootstrap-server", secured.sasl_ssl, "--command-config", conf, *argv[1:]
        )
    )
    assert line.startswith(f"moldau {argv[0]}: ")
    assert "authentication failed" in line.lower(), line


def test_a_raw_request_with_a_refused_login_is_a_cli_error(secured: Secured) -> None:
    """The raw requests' own login: a wrong password is refused by the broker, and the
    tool stops with the broker's reason instead of retrying."""
    from moldau.cli.admin_call import AdminCalls
    from moldau.cli.errors import CliError
    from moldau.protocol.apis import ApiKey

    settings = {
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(secured.certs.ca),
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": TOOLS_USER,
    }
    address = ("127.0.0.1", secured.broker.listener_ports["SASL_SSL"])
    fields = {"state_filters": [], "producer_id_filters": [], "duration_filter": -1}
    with AdminCalls("test", 10, settings | {"sasl.password": TOOLS_PASSWORD}) as calls:
        assert calls.call(address, ApiKey.LIST_TRANSACTIONS, 1, fields).error_code == 0
    wrong = AdminCalls("test", 10, settings | {"sasl.password": "not-it"})
    with wrong as calls, pytest.raises(CliError) as e:
        calls.call(address, ApiKey.LIST_TRANSACTIONS, 1, fields)
    assert "refused the SASL login" in str(e.value)
    assert "Invalid client credentials" in str(e.value)


def test_every_client_command_works_over_sasl_ssl_with_its_settings_file(
    secured: Secured,
) -> None:
    """Each `moldau` client command (pipeline: tests/spark/test_pipeline.py) against
    the SASL_SSL listener only, as a SCRAM-SHA-512 super user, its settings given by
    the flag Kafka's tool of the same job takes."""
    conf = str(
        secured.config_file(
            "admin",
            **{
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": ADMIN_USER,
                "sasl.password": ADMIN_PASSWORD,
            },
        )
    )
    topic, group = _name("all"), _name("group")
    at = ["--bootstrap-server", secured.sasl_ssl]
    cc = ["--command-config", conf]
    ok("topics", *at, *cc, "--create", "--topic", topic, "--partitions", "1",
       "--replication-factor", "1")  # fmt: skip
    assert topic in ok("topics", *at, *cc, "--list").split()
    produced = subprocess.run(
        [sys.executable, "-m", "moldau", "produce", *at, "--topic", topic,
         "--producer.config", conf],
        input="one\ntwo\n", capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr
    consumed = ok("consume", *at, "--topic", topic, "--from-beginning", "--max-messages", "2",
                  "--group", group, "--consumer.config", conf)  # fmt: skip
    assert consumed.split() == ["one", "two"]
    assert group in ok("groups", *at, *cc, "--list").split()
    assert topic in ok("groups", *at, *cc, "--describe", "--group", group)
    assert "SCRAM-SHA-256" in ok(
        "configs", *at, *cc, "--describe", "--entity-type", "users", "--entity-name", TOOLS_USER
    )
    assert f"User:{TOOLS_USER}" in ok("acls", *at, *cc, "--list")
    elected = ok("leader-election", *at, "--admin.config", conf, "--election-type",
                 "PREFERRED", "--topic", topic, "--partition", "0")  # fmt: skip
    assert f"Valid replica already elected for partitions {topic}-0" in elected
    ok("reassign-partitions", *at, *cc, "--list")
    ok("transactions", *at, *cc, "list")
