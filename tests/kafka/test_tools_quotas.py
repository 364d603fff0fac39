"""Kafka's own kafka-configs (ConfigCommand, from the Maven jars) sets and reads
client quotas on Moldau through AlterClientQuotas and DescribeClientQuotas, and
prints what it prints against Kafka (ConfigCommand's own lines: Kafka 4's
"Completed updating config for client c." and "Quota configs for client-id 'c'
are k=v, ..."). One JVM a call (~0.6 s); each line of the story is one call."""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from moldau.cli.admin_call import AdminCalls
from moldau.protocol.errors import ErrorCode
from moldau.testing.cluster import Cluster
from moldau.testing.process import BrokerProcess, wait_for
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
    # Removed again (on the wire: a JVM a call costs more than the rest).
    remove = [
        ([("client-id", client)], ["producer_byte_rate", "consumer_byte_rate"]),
        ([("user", user), ("client-id", client)], ["request_percentage"]),
    ]
    host, port = b.rsplit(":", 1)
    with AdminCalls("cleanup", 10.0) as calls:
        for entity, keys in remove:
            answer = calls.call((host, int(port)), 49, 1, {"validate_only": False, "entries": [{
                "entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                "ops": [{"key": k, "value": 0.0, "remove": True} for k in keys],
            }]})  # fmt: skip
            assert answer.entries[0].error_code == ErrorCode.none


def test_a_quota_set_with_kafka_configs_holds_on_every_broker_on_zookeeper(
    moldau_cluster: Cluster,
) -> None:
    """On ZooKeeper, set through one broker: every broker of the three throttles
    the client (librdkafka's throttle statistics per broker)."""
    b = moldau_cluster.bootstrap
    client, topic = f"zk-quota-{uuid.uuid4().hex[:6]}", f"zk-quota-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": b})
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(30)
    # 100 KB/s: over Kafka's 11 windows of 1 s, 1 MB a broker is over it.
    tool(CONFIGS, "--bootstrap-server", b, "--alter", "--entity-type", "clients",
         "--entity-name", client, "--add-config", "producer_byte_rate=102400")  # fmt: skip
    throttled: dict[str, int] = {}

    def stats(data: str) -> None:
        for name, broker in json.loads(data)["brokers"].items():
            if broker["nodeid"] >= 0:
                throttled[name] = max(throttled.get(name, 0), broker["throttle"]["max"])

    p = Producer({"bootstrap.servers": b, "client.id": client, "linger.ms": 5,
                  "statistics.interval.ms": 200, "stats_cb": stats})  # fmt: skip
    try:

        def every_broker_throttles() -> bool:
            for partition in range(3):
                for _ in range(40):
                    try:
                        p.produce(topic, b"z" * 10_000, partition=partition)
                    except BufferError:
                        break
            p.poll(0.1)
            return len(throttled) == 3 and all(ms > 0 for ms in throttled.values())

        assert wait_for(every_broker_throttles, 30), throttled
    finally:
        p.purge()
        p.flush(5)
        tool(CONFIGS, "--bootstrap-server", b, "--alter", "--entity-type", "clients",
             "--entity-name", client, "--delete-config", "producer_byte_rate")  # fmt: skip
        admin.delete_topics([topic])[topic].result(30)
