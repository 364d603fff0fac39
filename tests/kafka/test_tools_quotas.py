"""Kafka's own kafka-configs (ConfigCommand, from the Maven jars) sets and reads
client quotas on Moldau through AlterClientQuotas and DescribeClientQuotas, and
prints what it prints against Kafka (ConfigCommand's own lines: Kafka 4's
"Completed updating config for client c." and "Quota configs for client-id 'c'
are k=v, ..."). One JVM a call (~0.6 s); each line of the story is one call."""

from __future__ import annotations

import uuid

import pytest

from moldau.testing.process import BrokerProcess
from tests.kafka.tools import CONFIGS, failing_tool, tool

pytestmark = pytest.mark.java


def quota_line(out: str) -> tuple[str, set[str]]:
    """A "Quota configs for <entity> are k=v, k=v" line: the entity and the pairs
    (Kafka prints them in a HashMap's order)."""
    (line,) = [x for x in out.splitlines() if x.startswith("Quota configs for ")]
    entity, _, pairs = line[len("Quota configs for ") :].partition(" are ")
    return entity, set(pairs.split(", "))


def test_kafka_configs_alters_and_describes_client_quotas(moldau: BrokerProcess) -> None:
    b = moldau.bootstrap
    client, user = f"quota-{uuid.uuid4().hex[:6]}", f"user-{uuid.uuid4().hex[:6]}"
    alter = ("--bootstrap-server", b, "--alter")
    both = ("--entity-type", "users", "--entity-name", user,
            "--entity-type", "clients", "--entity-name", client)  # fmt: skip
    out = tool(CONFIGS, *alter, "--entity-type", "clients", "--entity-name", client,
               "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152")  # fmt: skip
    assert out.strip() == f"Completed updating config for client {client}."
    out = tool(CONFIGS, "--bootstrap-server", b, "--describe", "--entity-type", "clients",
               "--entity-name", client)  # fmt: skip
    assert quota_line(out) == (
        f"client-id '{client}'",
        {"producer_byte_rate=1048576.0", "consumer_byte_rate=2097152.0"},
    )

    # A user's client-id, and removing one quota of several.
    out = tool(CONFIGS, *alter, *both,
               "--add-config", "request_percentage=25.5,controller_mutation_rate=10")  # fmt: skip
    assert out.strip() == f"Completed updating config for user {user}."
    tool(CONFIGS, *alter, *both, "--delete-config", "controller_mutation_rate")
    out = tool(CONFIGS, "--bootstrap-server", b, "--describe", *both)
    assert quota_line(out) == (
        f"user-principal '{user}', client-id '{client}'",
        {"request_percentage=25.5"},
    )

    # Kafka's broker refuses a quota that is not positive; the tool says why.
    err = failing_tool(CONFIGS, *alter, "--entity-type", "clients", "--entity-name", client,
                       "--add-config", "producer_byte_rate=-5")  # fmt: skip
    assert "Quota producer_byte_rate must be greater than 0" in err
    # Deleting a quota not set: the tool finds that out from DescribeClientQuotas.
    err = failing_tool(CONFIGS, *alter, *both, "--delete-config", "consumer_byte_rate")
    assert "Invalid config(s): consumer_byte_rate" in err

    # The default client-id (removed again at once: the broker is shared).
    out = tool(CONFIGS, *alter, "--entity-type", "clients", "--entity-default",
               "--add-config", "consumer_byte_rate=104857600")  # fmt: skip
    try:
        assert out.strip() == "Completed updating default config for clients in the cluster."
        out = tool(CONFIGS, "--bootstrap-server", b, "--describe", "--entity-type", "clients",
                   "--entity-default")  # fmt: skip
        assert quota_line(out) == ("the default client-id", {"consumer_byte_rate=1.048576E8"})
    finally:
        tool(CONFIGS, *alter, "--entity-type", "clients", "--entity-default",
             "--delete-config", "consumer_byte_rate")  # fmt: skip
    tool(CONFIGS, *alter, "--entity-type", "clients", "--entity-name", client,
         "--delete-config", "producer_byte_rate,consumer_byte_rate")  # fmt: skip
    tool(CONFIGS, *alter, *both, "--delete-config", "request_percentage")
    out = tool(CONFIGS, "--bootstrap-server", b, "--describe", "--entity-type", "clients")
    assert client not in out
