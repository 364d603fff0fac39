"""`moldau configs` for client quotas and SCRAM credentials next to Kafka's own
kafka-configs, on the same broker: Apache Kafka 4.1.1, and Moldau once its broker
serves DescribeClientQuotas/AlterClientQuotas (48/49). What one tool changes the
other describes, and both print the same lines (sorted: Kafka's order is a hash
map's)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from moldau.cli.admin_call import AdminCalls
from moldau.protocol.errors import ErrorCode
from moldau.testing.apache_kafka import KafkaBroker
from tests.kafka.tools import CONFIGS, moldau_run, moldau_tool, tool

pytestmark = pytest.mark.java


@pytest.fixture(scope="module")
def apache_kafka(tmp_path_factory: pytest.TempPathFactory, kafka_java: Path) -> Iterator[str]:
    """A Kafka 4.1.1 broker (a single KRaft node) of this module's own."""
    with KafkaBroker.kraft(tmp_path_factory.mktemp("kafka-4-quotas")) as broker:
        yield broker.bootstrap


def serves_quotas(bootstrap: str) -> bool:
    """Whether the broker answers DescribeClientQuotas other than UNSUPPORTED_VERSION."""
    host, port = bootstrap.rsplit(":", 1)
    with AdminCalls("probe", 10.0) as calls:
        response = calls.call((host, int(port)), 48, 1, {"components": [], "strict": False})
    return bool(response.error_code != ErrorCode.unsupported_version)


@pytest.fixture(params=["apache-kafka", "moldau"])
def quota_broker(request: pytest.FixtureRequest) -> str:
    if request.param == "apache-kafka":
        return str(request.getfixturevalue("apache_kafka"))
    bootstrap = str(request.getfixturevalue("moldau").bootstrap)
    if not serves_quotas(bootstrap):
        pytest.skip(
            "Moldau's broker answers DescribeClientQuotas with UNSUPPORTED_VERSION "
            "(client quotas on the broker are another change); this runs once it serves them"
        )
    return bootstrap


def normalized(out: str) -> list[str]:
    """kafka-configs' lines sorted, each quota line's values sorted."""
    lines = []
    for line in out.splitlines():
        head, sep, values = line.partition(" are ")
        if head.startswith("Quota configs for "):
            values = ", ".join(sorted(values.split(", ")))
        lines.append(head + sep + values)
    return sorted(lines)


def test_moldau_configs_and_kafka_configs_alter_and_describe_the_same_quotas(
    quota_broker: str, capsys: pytest.CaptureFixture[str]
) -> None:
    b = quota_broker
    u = uuid.uuid4().hex[:8]
    user, client, other = f"alice-{u}", f"c1-{u}", f"c2-{u}"
    # Generous values: on a shared broker a default quota applies to every client.
    tera = "1000000000000"

    def ours(*args: str) -> str:
        return moldau_tool(capsys, "configs", "--bootstrap-server", b, *args)

    try:
        assert ours("--alter", "--user", user, "--add-config",
                    f"producer_byte_rate=1048576,consumer_byte_rate={tera}") == (
            f"Completed updating config for user {user}.\n"
        )  # fmt: skip
        assert ours("--alter", "--entity-type", "users", "--entity-name", user,
                    "--entity-type", "clients", "--entity-name", client,
                    "--add-config", "request_percentage=200") == (
            f"Completed updating config for user {user}.\n"
        )  # fmt: skip
        assert ours(
            "--alter", "--client-defaults", "--add-config", f"producer_byte_rate={tera}"
        ) == ("Completed updating default config for clients in the cluster.\n")
        ours("--alter", "--user", user, "--add-config",
             "SCRAM-SHA-256=[iterations=8192,password=pw]")  # fmt: skip
        # Kafka's tool: a default user's client.
        tool(CONFIGS, "--bootstrap-server", b, "--alter", "--user-defaults", "--client", other,
             "--add-config", "controller_mutation_rate=1000")  # fmt: skip

        described = {}
        for types in (["users"], ["users", "clients"], ["clients"]):
            args = ["--bootstrap-server", b, "--describe"]
            args += [x for t in types for x in ("--entity-type", t)]
            kafkas = tool(CONFIGS, *args)
            assert normalized(moldau_tool(capsys, "configs", *args)) == normalized(kafkas)
            described[" ".join(types)] = kafkas.splitlines()
        users = normalized("\n".join(described["users"]))
        assert (
            f"Quota configs for user-principal '{user}' are consumer_byte_rate=1.0E12, "
            "producer_byte_rate=1048576.0"
        ) in users
        assert (
            f"SCRAM credential configs for user-principal '{user}' are "
            "SCRAM-SHA-256=iterations=8192"
        ) in users
        assert (
            f"Quota configs for user-principal '{user}', client-id '{client}' are "
            "request_percentage=200.0"
        ) in described["users clients"]
        assert (
            f"Quota configs for the default user-principal, client-id '{other}' are "
            "controller_mutation_rate=1000.0"
        ) in described["users clients"]
        default = "Quota configs for the default client-id are producer_byte_rate=1.0E12"
        assert default in described["clients"]

        # kafka-configs' refusal (its own check, before any change) of a quota not set.
        args = ("--bootstrap-server", b, "--alter", "--user", user,
                "--delete-config", "request_percentage")  # fmt: skip
        assert moldau_run(capsys, "configs", *args)[1:] == (
            "",
            "moldau configs: Invalid config(s): request_percentage\n",
        )
        ours("--alter", "--user", user, "--delete-config", "producer_byte_rate")
        assert ours("--describe", "--user", user) == (
            f"Quota configs for user-principal '{user}' are consumer_byte_rate=1.0E12\n"
            f"SCRAM credential configs for user-principal '{user}' are "
            "SCRAM-SHA-256=iterations=8192\n"
        )
    finally:
        for entity, keys in (
            (["--user", user], "producer_byte_rate,consumer_byte_rate"),
            (["--user", user, "--client", client], "request_percentage"),
            (["--client-defaults"], "producer_byte_rate"),
            (["--user-defaults", "--client", other], "controller_mutation_rate"),
            (["--user", user], "SCRAM-SHA-256"),
        ):
            for key in keys.split(","):  # one at a time: some may be gone already
                moldau_run(capsys, "configs", "--bootstrap-server", b, "--alter", *entity,
                           "--delete-config", key)  # fmt: skip
