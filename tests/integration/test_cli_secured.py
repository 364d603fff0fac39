"""`moldau` client commands against a secured broker, each given its client settings
file (--command-config, or Kafka's own flag for it): a SASL_SSL listener with SCRAM
and an authorizer allowing nothing without an ACL. The raw-request tools
(`transactions`, `reassign-partitions`) run as a SCRAM user holding only the ACLs
they need, so their requests go over TLS with that login; a wrong password or a
mechanism they cannot speak is one line and a non-zero exit.

The broker's PLAINTEXT listener is the operator's (User:ANONYMOUS is a super user):
it sets up users, ACLs and open transactions."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclOperation,
    AdminClient,
    NewTopic,
    ResourceType,
)

from moldau.cli.main import main
from moldau.testing.browser import ConsoleProcess
from moldau.testing.process import wait_for
from tests.integration.secured import SecuredBroker, allow, secured_broker

pytestmark = pytest.mark.integration

TOOLS_USER, TOOLS_PASSWORD = "tools", "tools-secret"
ADMIN_USER, ADMIN_PASSWORD = "admin", "admin-secret"
PREFIX = "sec-"


def config_file(secured: SecuredBroker, path: Path, user: str = TOOLS_USER, **settings: str) -> str:
    """A client properties file for `user` on the SASL_SSL listener (librdkafka names)."""
    conf = secured.client_settings(user, **settings)
    path.write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
    return str(path)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredBroker]:
    tools = f"User:{TOOLS_USER}"
    cluster = ResourceType.BROKER, "kafka-cluster"
    # What kafka-transactions.sh and kafka-reassign-partitions.sh need, no more.
    grants = [
        allow(tools, *cluster, AclOperation.DESCRIBE),
        allow(tools, *cluster, AclOperation.ALTER),
        # --verify lifts the reassignment's throttles.
        allow(tools, *cluster, AclOperation.ALTER_CONFIGS),
        # WriteTxnMarkers (abort) is a broker's request: CLUSTER_ACTION, as in Kafka.
        allow(tools, *cluster, AclOperation.CLUSTER_ACTION),
        allow(tools, ResourceType.TOPIC, PREFIX, AclOperation.READ),
        allow(tools, ResourceType.TOPIC, PREFIX, AclOperation.ALTER_CONFIGS),
        allow(tools, ResourceType.TRANSACTIONAL_ID, PREFIX, AclOperation.DESCRIBE),
    ]
    users = {
        TOOLS_USER: ("SCRAM-SHA-256", TOOLS_PASSWORD),
        ADMIN_USER: ("SCRAM-SHA-512", ADMIN_PASSWORD),
    }
    with secured_broker(
        tmp_path_factory.mktemp("secured"), users, admin=ADMIN_USER, grants=grants
    ) as b:
        yield b


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
def open_transaction(secured: SecuredBroker) -> Iterator[tuple[str, str]]:
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
    secured: SecuredBroker, open_transaction: tuple[str, str], tmp_path: Path
) -> None:
    topic, tid = open_transaction
    conf = config_file(secured, tmp_path / "tools.properties")
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
    secured: SecuredBroker, tmp_path: Path
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
    conf = config_file(secured, tmp_path / "tools.properties")
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
    secured: SecuredBroker, tmp_path: Path, tool: list[str]
) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(
        '{"version": 1, "partitions": [{"topic": "x", "partition": 0, "replicas": [1]}]}'
    )
    conf = config_file(secured, tmp_path / "wrong.properties", **{"sasl.password": "not-it"})
    argv = [a.replace("PLAN", str(plan)) for a in tool]
    line = one_line_failure(
        moldau(
            *argv[:1], "--bootstrap-server", secured.sasl_ssl, "--command-config", conf, *argv[1:]
        )
    )
    assert line.startswith(f"moldau {argv[0]}: ")
    assert "authentication failed" in line.lower(), line


def test_a_raw_request_with_a_refused_login_is_a_cli_error(secured: SecuredBroker) -> None:
    """The raw requests' own login: a wrong password is refused by the broker, and the
    tool stops with the broker's reason instead of retrying."""
    from moldau.cli.admin_call import AdminCalls
    from moldau.cli.errors import CliError
    from moldau.protocol.apis import ApiKey

    settings = secured.client_settings(TOOLS_USER)
    address = ("127.0.0.1", secured.broker.listener_ports["SASL_SSL"])
    fields = {"state_filters": [], "producer_id_filters": [], "duration_filter": -1}
    with AdminCalls("test", 10, settings) as calls:
        assert calls.call(address, ApiKey.LIST_TRANSACTIONS, 1, fields).error_code == 0
    wrong = AdminCalls("test", 10, settings | {"sasl.password": "not-it"})
    with wrong as calls, pytest.raises(CliError) as e:
        calls.call(address, ApiKey.LIST_TRANSACTIONS, 1, fields)
    assert "refused the SASL login" in str(e.value)
    assert "SASL_AUTHENTICATION_FAILED: Authentication failed" in str(e.value)


def test_every_client_command_works_over_sasl_ssl_with_its_settings_file(
    secured: SecuredBroker, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each `moldau` client command (pipeline: tests/spark/test_secured.py) against
    the SASL_SSL listener only, as a SCRAM-SHA-512 super user, its settings given by
    the flag Kafka's tool of the same job takes."""
    conf = config_file(secured, tmp_path / "admin.properties", ADMIN_USER)
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

    # The raw-request tools in this process: a process each would double the test's time.
    def run(*argv: str) -> str:
        capsys.readouterr()
        code = main([*argv, *at, *cc])
        out, err = capsys.readouterr()
        assert code == 0, err
        return out

    plan = tmp_path / "offsets.json"
    plan.write_text(f'{{"partitions": [{{"topic": "{topic}", "partition": 0, "offset": 1}}]}}')
    deleted = run("delete-records", "--offset-json-file", str(plan))
    assert f"partition: {topic}-0\tlow_watermark: 1" in deleted
    assert run("get-offsets", "--topic", topic, "--time", "-2") == f"{topic}:0:1\n"
    assert f'"partition":"{topic}-0"' in run("log-dirs", "--describe")
    assert "\tApiVersions(18): " in run("broker-api-versions")


def console_call(url: str, method: str = "GET", body: object = None) -> tuple[int, Any]:
    """(status, JSON) of one request to the console's API, as its pages make it."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_the_console_reads_and_writes_over_sasl_ssl_with_its_settings_file(
    secured: SecuredBroker, tmp_path: Path
) -> None:
    """`moldau ui --command-config`: its AdminClient, its raw requests (DescribeLogDirs
    for sizes), and the message browser's consumer and producer all log in."""
    conf = config_file(secured, tmp_path / "admin.properties", ADMIN_USER)
    topic = _name("ui")
    args = ["--command-config", conf]
    with ConsoleProcess(secured.sasl_ssl, tmp_path / "ui.log", args) as console:
        api = console.url + "api/"
        assert wait_for(lambda: console_call(api + "cluster")[1]["brokers"], timeout=20)
        status, cluster = console_call(api + "cluster")
        assert cluster["error"] is None
        sasl_port = secured.broker.listener_ports["SASL_SSL"]
        assert [(b["id"], b["port"], b["online"]) for b in cluster["brokers"]] == [
            (1, sasl_port, True)
        ]
        assert console_call(api + "topics", "POST", {"name": topic, "partitions": 2})[0] == 201
        written = console_call(
            api + f"topics/{topic}/messages", "POST", {"value": "over TLS", "partition": 1}
        )
        assert written == (201, {"partition": 1, "offset": 0})
        status, described = console_call(api + f"topics/{topic}")
        assert status == 200, described
        p1 = described["partitions"][1]
        assert (p1["highWatermark"], p1["lastStable"]) == (1, 1)
        assert p1["size"] > 0  # DescribeLogDirs, a raw request, logged in too
        status, read = console_call(api + f"topics/{topic}/messages?from=beginning")
        assert status == 200, read
        assert [base64.b64decode(r["value"]) for r in read["records"]] == [b"over TLS"]
        # The operator's pages too: groups, reassignments (a raw request), security.
        for path in ["groups", "reassignments", "security/acls", "security/users"]:
            status, answer = console_call(api + path)
            assert status == 200, (path, answer)
        assert f"User:{TOOLS_USER}" in json.dumps(console_call(api + "security/acls")[1])
        assert TOOLS_USER in json.dumps(console_call(api + "security/users")[1])
        assert console.stop() == 0


def test_the_console_with_a_wrong_password_says_so_at_once(
    secured: SecuredBroker, tmp_path: Path
) -> None:
    """Every page gets the broker's refusal in a second, not a timeout."""
    conf = config_file(secured, tmp_path / "wrong.properties", ADMIN_USER, **{"sasl.password": "x"})
    args = ["--command-config", conf]
    with ConsoleProcess(secured.sasl_ssl, tmp_path / "ui.log", args) as console:
        api = console.url + "api/"
        assert wait_for(lambda: console_call(api + "cluster")[1]["error"], timeout=5)
        refused = console_call(api + "cluster")[1]["error"]
        assert refused.startswith("_AUTHENTICATION: "), refused
        assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in refused
        for method, path, body in [
            ("GET", "topics", None),
            ("POST", "topics", {"name": _name("never")}),
            ("GET", "topics/any", None),
            ("GET", "topics/any/messages", None),
        ]:
            began = time.monotonic()
            assert console_call(api + path, method, body) == (502, {"error": refused})
            assert time.monotonic() - began < 1.0
        assert console.stop() == 0
