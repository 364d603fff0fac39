"""Kafka's own command-line tools, unchanged from the Maven jars, against Moldau: what
each prints for a user to read (the tables, the lines), on the shared three-broker
cluster (no faults here; tests/kafka/test_verifiable.py has its own cluster) and,
for configs, on one broker too. Each tool start is a JVM (~0.6 s), so each test
runs a tool's whole story once."""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import AdminClient, NewTopic

from moldau.cli.main import main as moldau_main
from moldau.protocol.apis import SUPPORTED_VERSIONS, ApiKey
from moldau.testing import kafka_java
from moldau.testing.cluster import Cluster
from moldau.testing.process import BrokerProcess, wait_for
from tests.kafka.tools import (
    API_VERSIONS,
    CONFIGS,
    CONSOLE_CONSUMER,
    CONSOLE_PRODUCER,
    CONSUMER_GROUPS,
    CONSUMER_PERF,
    GET_OFFSETS,
    PRODUCER_PERF,
    REASSIGN,
    TOPICS,
    describe_topic,
    failing_tool,
    offsets,
    table,
    tool,
)

pytestmark = pytest.mark.java


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_kafka_topics_creates_lists_describes_alters_and_deletes(moldau_cluster: Cluster) -> None:
    b = moldau_cluster.bootstrap
    topic = _name("topics")
    out = tool(TOPICS, "--bootstrap-server", b, "--create", "--topic", topic, "--partitions", "3",
               "--replication-factor", "3", "--config", "min.insync.replicas=2")  # fmt: skip
    assert out.strip() == f"Created topic {topic}."
    assert topic in tool(TOPICS, "--bootstrap-server", b, "--list").split()

    described = tool(TOPICS, "--bootstrap-server", b, "--describe", "--topic", topic)
    assert f"Topic: {topic}\t" in described
    assert "PartitionCount: 3\tReplicationFactor: 3\tConfigs: min.insync.replicas=2" in described
    before = describe_topic(b, topic)
    assert [p.partition for p in before] == [0, 1, 2]
    for p in before:
        assert sorted(p.replicas) == [1, 2, 3]
        assert sorted(p.isr) == [1, 2, 3]
        assert p.leader == p.replicas[0]
    # Leadership spread over the brokers, as Kafka's assignment does.
    assert {p.leader for p in before} == {1, 2, 3}

    tool(TOPICS, "--bootstrap-server", b, "--alter", "--topic", topic, "--partitions", "5")
    after = describe_topic(b, topic)
    assert [p.partition for p in after] == [0, 1, 2, 3, 4]
    assert after[:3] == before
    assert all(sorted(p.replicas) == [1, 2, 3] and p.leader is not None for p in after)

    # Healthy: every filter of unhealthy partitions lists none of this topic's.
    for flag in ("--under-replicated-partitions", "--unavailable-partitions",
                 "--under-min-isr-partitions"):  # fmt: skip
        assert topic not in tool(TOPICS, "--bootstrap-server", b, "--describe", flag), flag
    overrides = tool(TOPICS, "--bootstrap-server", b, "--describe", "--topics-with-overrides")
    assert f"Topic: {topic}\t" in overrides

    err = failing_tool(TOPICS, "--bootstrap-server", b, "--create", "--topic", topic,
                       "--partitions", "1")  # fmt: skip
    assert f"Topic '{topic}' already exists." in err
    err = failing_tool(TOPICS, "--bootstrap-server", b, "--alter", "--topic", topic,
                       "--partitions", "2")  # fmt: skip
    assert "Topic currently has 5 partitions, which is higher than the requested 2." in err
    err = failing_tool(TOPICS, "--bootstrap-server", b, "--create", "--topic", _name("rf"),
                       "--partitions", "1", "--replication-factor", "4")  # fmt: skip
    assert "Replication factor: 4 larger than available brokers: 3." in err

    tool(TOPICS, "--bootstrap-server", b, "--delete", "--topic", topic)
    assert wait_for(
        lambda: topic not in tool(TOPICS, "--bootstrap-server", b, "--list").split(), 30, 0.5
    )


def test_console_producer_and_consumer_keep_keys_partitions_and_the_groups_offsets(
    moldau_cluster: Cluster,
) -> None:
    b = moldau_cluster.bootstrap
    topic, group = _name("console"), _name("console-group")
    tool(TOPICS, "--bootstrap-server", b, "--create", "--topic", topic, "--partitions", "3",
         "--replication-factor", "3")  # fmt: skip
    sent = [(f"key-{i % 4}", f"value-{i}") for i in range(20)]
    tool(CONSOLE_PRODUCER, "--bootstrap-server", b, "--topic", topic,
         "--property", "parse.key=true", "--property", "key.separator=:",
         "--producer-property", "acks=all",
         input="".join(f"{k}:{v}\n" for k, v in sent))  # fmt: skip
    started_ms = int(time.time() * 1000)

    out = tool(CONSOLE_CONSUMER, "--bootstrap-server", b, "--topic", topic, "--from-beginning",
               "--group", group, "--max-messages", "20",
               "--property", "print.key=true", "--property", "print.timestamp=true",
               "--property", "print.partition=true", "--property", "print.offset=true")  # fmt: skip
    line = re.compile(r"CreateTime:(\d+)\tPartition:(\d+)\tOffset:(\d+)\t(\S+)\t(\S+)")
    got = [line.fullmatch(x) for x in out.splitlines()]
    assert all(got), out
    records = [(int(m[1]), int(m[2]), int(m[3]), m[4], m[5]) for m in got if m]
    assert sorted((k, v) for _, _, _, k, v in records) == sorted(sent)
    # One key, one partition; within it, offsets in the order sent.
    partition_of = {k: p for _, p, _, k, _ in records}
    assert all(partition_of[k] == p for _, p, _, k, _ in records)
    for p in set(partition_of.values()):
        mine = sorted((o, v) for _, q, o, _, v in records if q == p)
        assert [o for o, _ in mine] == list(range(len(mine)))
        assert [v for _, v in mine] == [v for k, v in sent if partition_of[k] == p]
    assert all(abs(ts - started_ms) < 120_000 for ts, *_ in records)

    # The console consumer committed what it read: no lag left.
    rows = table(tool(CONSUMER_GROUPS, "--bootstrap-server", b, "--describe", "--group", group),
                 "GROUP")  # fmt: skip
    assert {int(r["PARTITION"]) for r in rows} == {0, 1, 2}
    for r in rows:
        assert r["TOPIC"] == topic
        assert r["CURRENT-OFFSET"] == r["LOG-END-OFFSET"]
        assert r["LAG"] == "0"
    assert sum(int(r["LOG-END-OFFSET"]) for r in rows) == 20


def _produce_lines(b: str, topic: str, lines: list[str]) -> None:
    tool(CONSOLE_PRODUCER, "--bootstrap-server", b, "--topic", topic,
         input="".join(f"{x}\n" for x in lines))  # fmt: skip


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]


def test_kafka_get_offsets_and_consumer_group_resets_by_time_offset_and_shift(
    moldau_cluster: Cluster,
) -> None:
    b = moldau_cluster.bootstrap
    topic, group = _name("offsets"), _name("reset-group")
    tool(TOPICS, "--bootstrap-server", b, "--create", "--topic", topic, "--partitions", "1",
         "--replication-factor", "3")  # fmt: skip
    # Two producer runs, a JVM start apart: the fourth record is newer than the first three.
    _produce_lines(b, topic, ["a0", "a1", "a2"])
    _produce_lines(b, topic, ["b3"])
    out = tool(CONSOLE_CONSUMER, "--bootstrap-server", b, "--topic", topic, "--from-beginning",
               "--group", group, "--max-messages", "4",
               "--property", "print.timestamp=true", "--property", "print.offset=true")  # fmt: skip
    stamps = {}
    for x in out.splitlines():
        ts, offset, value = x.split("\t")
        stamps[int(offset.split(":")[1])] = (int(ts.split(":")[1]), value)
    assert [v for _, v in sorted(stamps.values())] == ["a0", "a1", "a2", "b3"]
    ts_b3 = stamps[3][0]
    assert ts_b3 > max(stamps[i][0] for i in range(3))

    def get_offsets(time_arg: str) -> dict[int, int]:
        return offsets(tool(GET_OFFSETS, "--bootstrap-server", b, "--topic", topic,
                            "--time", time_arg))  # fmt: skip

    assert get_offsets("-1") == {0: 4}  # latest
    assert get_offsets("-2") == {0: 0}  # earliest
    assert get_offsets("-3") == {0: 3}  # the record of the largest timestamp
    assert get_offsets(str(ts_b3)) == {0: 3}
    # No tiered storage: the earliest local offset is the log start, and nothing is
    # tiered (offset -1: the tool prints no line, and no error either).
    assert get_offsets("-4") == {0: 0}
    tiered = kafka_java.run(GET_OFFSETS, "--bootstrap-server", b, "--topic", topic,
                            "--time", "-5")  # fmt: skip
    assert (tiered.returncode, tiered.stdout) == (0, "")
    assert "Skip getting offsets" not in tiered.stderr, tiered.stderr

    def reset(*how: str) -> dict[int, int]:
        out = tool(CONSUMER_GROUPS, "--bootstrap-server", b, "--reset-offsets",
                   "--group", group, "--topic", topic, *how)  # fmt: skip
        return {int(r["PARTITION"]): int(r["NEW-OFFSET"]) for r in table(out, "GROUP")}

    def read_on(count: int) -> list[str]:
        return tool(CONSOLE_CONSUMER, "--bootstrap-server", b, "--topic", topic,
                    "--group", group, "--max-messages", str(count)).split()  # fmt: skip

    # A dry run (the default without --execute) shows the plan and changes nothing.
    assert reset("--to-earliest") == {0: 0}
    assert reset("--to-offset", "100", "--dry-run") == {0: 4}  # clamped to the log end
    assert reset("--shift-by", "-3", "--dry-run") == {0: 1}
    assert reset("--to-datetime", _iso(ts_b3), "--dry-run") == {0: 3}
    assert reset("--by-duration", "PT1H", "--dry-run") == {0: 0}

    assert reset("--to-offset", "1", "--execute") == {0: 1}
    assert reset("--shift-by", "1", "--execute") == {0: 2}
    # The group reads on from the offset set, not from where the dry runs pointed.
    assert read_on(2) == ["a2", "b3"]
    assert reset("--to-earliest", "--execute") == {0: 0}
    assert reset("--to-latest", "--execute") == {0: 4}
    (row,) = table(tool(CONSUMER_GROUPS, "--bootstrap-server", b, "--describe",
                        "--group", group), "GROUP")  # fmt: skip
    assert row["LAG"] == "0"


def test_kafka_consumer_groups_lists_describes_and_deletes_groups_and_offsets(
    moldau_cluster: Cluster, tmp_path: Path
) -> None:
    b = moldau_cluster.bootstrap
    topic, other = _name("groups"), _name("groups-other")
    idle, active, instance = _name("idle"), _name("active"), _name("instance")
    for t in (topic, other):
        tool(TOPICS, "--bootstrap-server", b, "--create", "--topic", t, "--partitions", "2",
             "--replication-factor", "2")  # fmt: skip
        _produce_lines(b, t, [f"{t}-{i}" for i in range(6)])
    # A group with no members and offsets on both topics, made by a reset.
    tool(CONSUMER_GROUPS, "--bootstrap-server", b, "--reset-offsets", "--group", idle,
         "--topic", topic, "--topic", other, "--to-latest", "--execute")  # fmt: skip
    # A stable group of one static member that stays.
    log = (tmp_path / "consumer.out").open("w")
    consumer = kafka_java.popen(
        CONSOLE_CONSUMER, "--bootstrap-server", b, "--topic", topic, "--group", active,
        "--consumer-property", f"group.instance.id={instance}",
        "--consumer-property", "client.id=console-1",
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:

        def members() -> list[dict[str, str]]:
            out = tool(CONSUMER_GROUPS, "--bootstrap-server", b, "--describe", "--group", active,
                       "--members", "--verbose")  # fmt: skip
            return table(out, "GROUP")

        # Listed as soon as it joins; its partitions once the rebalance completes.
        assert wait_for(lambda: [m["#PARTITIONS"] for m in members()] == ["2"], 60, 0.5)
        (member,) = members()
        # Kafka names a static member by its instance id, not its client id.
        assert member["CONSUMER-ID"].startswith(f"{instance}-"), member
        assert member["GROUP-INSTANCE-ID"] == instance
        assert member["CLIENT-ID"] == "console-1"
        assert member["#PARTITIONS"] == "2"
        assert member["CURRENT-ASSIGNMENT"] == f"{topic}:0,1"

        out = tool(CONSUMER_GROUPS, "--bootstrap-server", b, "--describe", "--group", active,
                   "--state")  # fmt: skip
        (state,) = table(out, "GROUP")
        assert (state["ASSIGNMENT-STRATEGY"], state["STATE"], state["#MEMBERS"]) == (
            "range", "Stable", "1")  # fmt: skip
        coordinator = re.search(r"\((\d+)\)", out)
        assert coordinator is not None and int(coordinator[1]) in (1, 2, 3)

        listed = tool(CONSUMER_GROUPS, "--bootstrap-server", b, "--list").split()
        assert {idle, active} <= set(listed)
        by_state = {r["GROUP"]: r["STATE"]
                    for r in table(tool(CONSUMER_GROUPS, "--bootstrap-server", b, "--list",
                                        "--state"), "GROUP")}  # fmt: skip
        assert (by_state[idle], by_state[active]) == ("Empty", "Stable")
        by_type = {r["GROUP"]: r["TYPE"]
                   for r in table(tool(CONSUMER_GROUPS, "--bootstrap-server", b, "--list",
                                       "--type"), "GROUP")}  # fmt: skip
        assert (by_type[idle], by_type[active]) == ("Classic", "Classic")
        only_consumer = tool(CONSUMER_GROUPS, "--bootstrap-server", b, "--list",
                             "--type", "consumer")  # fmt: skip
        assert idle not in only_consumer and active not in only_consumer
        stable_only = tool(CONSUMER_GROUPS, "--bootstrap-server", b, "--list", "--state",
                           "stable")  # fmt: skip
        assert active in stable_only and idle not in stable_only

        out = tool(CONSUMER_GROUPS, "--bootstrap-server", b, "--reset-offsets", "--group", active,
                   "--topic", topic, "--to-earliest", "--execute")  # fmt: skip
        assert (
            f"Assignments can only be reset if the group '{active}' is inactive, but the "
            "current state is Stable."
        ) in out
        out = tool(CONSUMER_GROUPS, "--bootstrap-server", b, "--delete", "--group", active)
        assert "The group is not empty." in out
        # Offsets of a topic the group reads cannot go; the group keeps them.
        out = tool(CONSUMER_GROUPS, "--bootstrap-server", b, "--delete-offsets",
                   "--group", active, "--topic", topic)  # fmt: skip
        assert "GroupSubscribedToTopicException" in out
    finally:
        consumer.terminate()
        consumer.wait(30)
        log.close()

    out = tool(CONSUMER_GROUPS, "--bootstrap-server", b, "--describe", "--group", idle,
               "--offsets")  # fmt: skip
    rows = table(out, "GROUP")
    assert {(r["TOPIC"], r["PARTITION"], r["LAG"]) for r in rows} == {
        (t, p, "0") for t in (topic, other) for p in ("0", "1")
    }

    # One partition's offset, one that does not exist, then a whole topic's.
    out = tool(CONSUMER_GROUPS, "--bootstrap-server", b, "--delete-offsets", "--group", idle,
               "--topic", f"{topic}:0,7")  # fmt: skip
    status = {r["PARTITION"]: r["STATUS"] for r in table(out, "TOPIC")}
    assert status["0"] == "Successful"
    assert "UnknownTopicOrPartitionException" in status["7"]
    rows = table(tool(CONSUMER_GROUPS, "--bootstrap-server", b, "--describe", "--group", idle),
                 "GROUP")  # fmt: skip
    assert {(r["TOPIC"], r["PARTITION"]) for r in rows} == {
        (topic, "1"),
        (other, "0"),
        (other, "1"),
    }
    out = tool(CONSUMER_GROUPS, "--bootstrap-server", b, "--delete-offsets", "--group", idle,
               "--topic", other)  # fmt: skip
    assert "Request succeeded for deleting offsets" in out
    rows = table(tool(CONSUMER_GROUPS, "--bootstrap-server", b, "--describe", "--group", idle),
                 "GROUP")  # fmt: skip
    assert {(r["TOPIC"], r["PARTITION"]) for r in rows} == {(topic, "1")}

    out = tool(CONSUMER_GROUPS, "--bootstrap-server", b, "--delete", "--group", idle)
    assert f"Deletion of requested consumer groups ('{idle}') was successful." in out
    assert idle not in tool(CONSUMER_GROUPS, "--bootstrap-server", b, "--list").split()
    out = tool(CONSUMER_GROUPS, "--bootstrap-server", b, "--describe", "--group", idle)
    assert f"Consumer group '{idle}' does not exist." in out


def _config_lines(output: str) -> dict[str, str]:
    """`  name=value sensitive=... synonyms={...}` lines of kafka-configs, by name."""
    out = {}
    for line in output.splitlines():
        m = re.match(r"  (\S+?)=(\S*) sensitive=\w+ synonyms=\{(.*)\}$", line)
        if m:
            out[m[1]] = f"{m[2]} {{{m[3]}}}"
    return out


def test_kafka_configs_alters_and_describes_topics_and_brokers(moldau_cluster: Cluster) -> None:
    b = moldau_cluster.bootstrap
    topic = _name("configs")
    tool(TOPICS, "--bootstrap-server", b, "--create", "--topic", topic, "--partitions", "1",
         "--config", "min.insync.replicas=1")  # fmt: skip

    def topic_configs(*extra: str) -> dict[str, str]:
        out = tool(CONFIGS, "--bootstrap-server", b, "--describe", "--entity-type", "topics",
                   "--entity-name", topic, *extra)  # fmt: skip
        return _config_lines(out)

    out = tool(CONFIGS, "--bootstrap-server", b, "--alter", "--entity-type", "topics",
               "--entity-name", topic,
               "--add-config", "retention.ms=3600000,cleanup.policy=[compact,delete]")  # fmt: skip
    assert out.strip() == f"Completed updating config for topic {topic}."
    now = topic_configs()
    assert now["min.insync.replicas"] == (
        "1 {DYNAMIC_TOPIC_CONFIG:min.insync.replicas=1, DEFAULT_CONFIG:min.insync.replicas=1}"
    )
    assert now["retention.ms"].startswith("3600000 {DYNAMIC_TOPIC_CONFIG:retention.ms=3600000")
    assert now["cleanup.policy"].startswith("compact,delete {DYNAMIC_TOPIC_CONFIG:")
    tool(CONFIGS, "--bootstrap-server", b, "--alter", "--entity-type", "topics",
         "--entity-name", topic, "--delete-config", "cleanup.policy")  # fmt: skip
    every = topic_configs("--all")
    assert every["cleanup.policy"] == "delete {DEFAULT_CONFIG:log.cleanup.policy=delete}"
    assert every["max.message.bytes"].startswith("1048588 ")
    # Kafka lists a time config's broker synonyms only from its primary name on, and
    # log.retention.ms has no default: the topic's own value is the only synonym.
    assert every["retention.ms"] == "3600000 {DYNAMIC_TOPIC_CONFIG:retention.ms=3600000}"
    assert every["segment.ms"] == "604800000 {}"
    assert every["min.insync.replicas"].startswith("1 {DYNAMIC_TOPIC_CONFIG:")

    err = failing_tool(CONFIGS, "--bootstrap-server", b, "--alter", "--entity-type", "topics",
                       "--entity-name", topic, "--add-config", "retention.ms=soon")  # fmt: skip
    assert "Invalid value soon for configuration retention.ms" in err
    err = failing_tool(CONFIGS, "--bootstrap-server", b, "--alter", "--entity-type", "topics",
                       "--entity-name", topic, "--add-config", "no.such.config=1")  # fmt: skip
    assert "Unknown topic config name: no.such.config" in err
    err = failing_tool(CONFIGS, "--bootstrap-server", b, "--alter", "--entity-type", "brokers",
                       "--entity-name", "1", "--add-config", "broker.id=7")  # fmt: skip
    assert "Cannot update these configs dynamically" in err and "broker.id" in err

    # A broker's dynamic config, and the cluster-wide default of every broker.
    rate = "leader.replication.throttled.rate"

    def broker_configs(*entity: str) -> str:
        return tool(CONFIGS, "--bootstrap-server", b, "--describe", "--entity-type", "brokers",
                    *entity)  # fmt: skip

    try:
        tool(CONFIGS, "--bootstrap-server", b, "--alter", "--entity-type", "brokers",
             "--entity-name", "1", "--add-config", f"{rate}=1000000")  # fmt: skip
        out = tool(CONFIGS, "--bootstrap-server", b, "--alter", "--entity-type", "brokers",
                   "--entity-default", "--add-config", f"{rate}=2000000")  # fmt: skip
        assert out.strip() == "Completed updating default config for brokers in the cluster."
        # Brokers learn of a change through ZooKeeper's notifications, as Kafka's do.
        assert wait_for(lambda: _config_lines(broker_configs("--entity-name", "1")).get(rate, "")
                        .startswith(f"1000000 {{DYNAMIC_BROKER_CONFIG:{rate}=1000000, "
                                    f"DYNAMIC_DEFAULT_BROKER_CONFIG:{rate}=2000000"),
                        20, 0.2)  # fmt: skip
        assert broker_configs("--entity-name", "1").splitlines()[0] == (
            "Dynamic configs for broker 1 are:"
        )
        # The default resource lists the defaults set, and nothing of broker 1's.
        assert wait_for(lambda: _config_lines(broker_configs("--entity-default")) == {
            rate: f"2000000 {{DYNAMIC_DEFAULT_BROKER_CONFIG:{rate}=2000000}}"
        }, 20, 0.2)  # fmt: skip
    finally:
        tool(CONFIGS, "--bootstrap-server", b, "--alter", "--entity-type", "brokers",
             "--entity-name", "1", "--delete-config", rate)  # fmt: skip
        tool(CONFIGS, "--bootstrap-server", b, "--alter", "--entity-type", "brokers",
             "--entity-default", "--delete-config", rate)  # fmt: skip
    assert wait_for(lambda: _config_lines(broker_configs("--entity-default")) == {}, 20, 0.2)


def test_kafka_reassign_partitions_generates_executes_and_verifies_a_move_with_the_data(
    moldau_cluster: Cluster, tmp_path: Path
) -> None:
    b = moldau_cluster.bootstrap
    topic = _name("reassign")
    # Two replicas each over brokers 1, 2 and 3; the move takes every replica off broker 1.
    tool(TOPICS, "--bootstrap-server", b, "--create", "--topic", topic,
         "--replica-assignment", "1:2,2:3,3:1")  # fmt: skip
    lines = [f"r-{i}" for i in range(300)]
    _produce_lines(b, topic, lines)
    before = offsets(tool(GET_OFFSETS, "--bootstrap-server", b, "--topic", topic))
    assert sum(before.values()) == 300

    topics_file = tmp_path / "topics.json"
    topics_file.write_text(json.dumps({"topics": [{"topic": topic}], "version": 1}))
    out = tool(REASSIGN, "--bootstrap-server", b, "--generate",
               "--topics-to-move-json-file", str(topics_file), "--broker-list", "2,3")  # fmt: skip
    current_line, proposed_line = (
        x for x in out.splitlines() if x.startswith("{")
    )  # "Current partition replica assignment", then "Proposed ..."
    current = {p["partition"]: p["replicas"] for p in json.loads(current_line)["partitions"]}
    assert current == {0: [1, 2], 1: [2, 3], 2: [3, 1]}
    proposed = json.loads(proposed_line)
    assert {p["partition"] for p in proposed["partitions"]} == {0, 1, 2}
    for p in proposed["partitions"]:
        assert sorted(p["replicas"]) == [2, 3]

    plan = tmp_path / "plan.json"
    plan.write_text(proposed_line)
    out = tool(REASSIGN, "--bootstrap-server", b, "--execute", "--reassignment-json-file",
               str(plan))  # fmt: skip
    assert f"Successfully started partition reassignments for {topic}-0,{topic}-1,{topic}-2" in out

    def verified() -> bool:
        out = tool(REASSIGN, "--bootstrap-server", b, "--verify", "--reassignment-json-file",
                   str(plan))  # fmt: skip
        return all(f"Reassignment of partition {topic}-{p} is completed." in out for p in range(3))

    assert wait_for(verified, 60, 1.0)
    target = {p["partition"]: p["replicas"] for p in proposed["partitions"]}
    for p in describe_topic(b, topic):
        assert list(p.replicas) == target[p.partition]
        assert sorted(p.isr) == [2, 3]
        assert p.leader in (2, 3)
    assert offsets(tool(GET_OFFSETS, "--bootstrap-server", b, "--topic", topic)) == before
    got = tool(CONSOLE_CONSUMER, "--bootstrap-server", b, "--topic", topic, "--from-beginning",
               "--max-messages", "300", "--timeout-ms", "30000")  # fmt: skip
    assert sorted(got.split()) == sorted(lines)


def test_kafka_broker_api_versions_lists_what_each_broker_advertises(
    moldau_cluster: Cluster,
) -> None:
    out = tool(API_VERSIONS, "--bootstrap-server", moldau_cluster.bootstrap)
    brokers = re.split(r"^(\S+) \(id: (\d+) rack: null isFenced: false\) -> \(\n", out, flags=re.M)
    assert brokers[0] == ""
    ids = {int(i) for i in brokers[2::3]}
    assert ids == {1, 2, 3}
    for body in brokers[3::3]:
        advertised: dict[int, tuple[int, int]] = {}
        for m in re.finditer(r"\t\w+\((\d+)\): (\d+)(?: to (\d+))? \[", body):
            low = int(m[2])
            advertised[int(m[1])] = (low, int(m[3]) if m[3] else low)
        assert advertised == {int(k): v for k, v in SUPPORTED_VERSIONS.items()}
        assert f"Produce(0): 0 to {SUPPORTED_VERSIONS[ApiKey.PRODUCE][1]} [usable: " in body


def test_the_perf_tests_send_and_consume_every_record_they_report(
    moldau_cluster: Cluster,
) -> None:
    b = moldau_cluster.bootstrap
    topic = _name("perf")
    tool(TOPICS, "--bootstrap-server", b, "--create", "--topic", topic, "--partitions", "3",
         "--replication-factor", "3")  # fmt: skip
    out = tool(PRODUCER_PERF, "--topic", topic, "--num-records", "5000", "--record-size", "100",
               "--throughput", "-1",
               "--producer-props", f"bootstrap.servers={b}", "acks=all", "linger.ms=5")  # fmt: skip
    m = re.search(r"^5000 records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg "
                  r"latency, [\d.]+ ms max latency", out, re.M)  # fmt: skip
    assert m, out
    assert sum(offsets(tool(GET_OFFSETS, "--bootstrap-server", b, "--topic", topic)).values()) == (
        5000
    )
    out = tool(CONSUMER_PERF, "--bootstrap-server", b, "--topic", topic, "--messages", "5000",
               "--timeout", "60000")  # fmt: skip
    header, values = out.strip().splitlines()[-2:]
    report = dict(zip((h.strip() for h in header.split(",")),
                      (v.strip() for v in values.split(",")), strict=True))  # fmt: skip
    assert int(report["data.consumed.in.nMsg"]) == 5000
    assert float(report["data.consumed.in.MB"]) == pytest.approx(5000 * 100 / 1024 / 1024, 1e-3)


def _moldau_tool(*args: str) -> str:
    """A `moldau` command that must succeed, in this process; its stdout."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = moldau_main(list(args))
    assert code == 0, out.getvalue()
    return out.getvalue()


def _shape(line: str) -> str:
    """A line with its numbers' digits blurred: what must match between two runs."""
    return re.sub(r"\d+", "9", line)


def _csv(output: str) -> dict[str, str]:
    header, values = output.strip().splitlines()[-2:]
    return dict(
        zip(
            (h.strip() for h in header.split(",")),
            (v.strip() for v in values.split(",")),
            strict=True,
        )
    )


def test_moldau_perf_prints_what_kafkas_perf_tests_print_and_sends_every_record(
    moldau: BrokerProcess,
) -> None:
    b = moldau.bootstrap
    topic = _name("moldau-perf")
    admin = AdminClient({"bootstrap.servers": b})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    kafka = tool(PRODUCER_PERF, "--topic", topic, "--num-records", "500", "--record-size", "50",
                 "--throughput", "-1", "--producer-props", f"bootstrap.servers={b}")  # fmt: skip
    ours = _moldau_tool("perf", "produce", "--topic", topic, "--num-records", "3000",
                        "--record-size", "100", "--throughput", "-1",
                        "--producer-props", f"bootstrap.servers={b}", "acks=all")  # fmt: skip
    [kafka_total] = [x for x in kafka.splitlines() if " ms 99.9th." in x]
    [our_total] = ours.splitlines()
    assert _shape(our_total) == _shape(kafka_total)
    assert our_total.startswith("3000 records sent, ")
    ends = [CTP(topic, p) for p in (0, 1)]
    c = Consumer({"bootstrap.servers": b, "group.id": "perf-check"})
    try:
        assert sum(c.get_watermark_offsets(tp, timeout=10)[1] for tp in ends) == 3500
    finally:
        c.close()
    ours = _moldau_tool("perf", "consume", "--bootstrap-server", b, "--topic", topic,
                        "--messages", "3500", "--timeout", "10000")  # fmt: skip
    kafka = tool(CONSUMER_PERF, "--bootstrap-server", b, "--topic", topic, "--messages", "3500",
                 "--timeout", "10000")  # fmt: skip
    assert ours.splitlines()[0] == kafka.strip().splitlines()[-2]  # the header
    assert _shape(ours.splitlines()[1]) == _shape(kafka.strip().splitlines()[-1])
    for report in (_csv(ours), _csv(kafka)):
        assert int(report["data.consumed.in.nMsg"]) == 3500
        assert float(report["data.consumed.in.MB"]) == pytest.approx(
            (500 * 50 + 3000 * 100) / 1024 / 1024, abs=1e-4
        )


def test_moldau_perf_produce_in_transactions_commits_every_record(
    moldau: BrokerProcess, tmp_path: Path
) -> None:
    b = moldau.bootstrap
    topic = _name("moldau-perf-txn")
    admin = AdminClient({"bootstrap.servers": b})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    out = _moldau_tool("perf", "produce", "--topic", topic, "--num-records", "400",
                       "--payload-monotonic", "--throughput", "2000", "--bootstrap-server", b,
                       "--transactional-id", f"{topic}-tx",
                       "--transaction-duration-ms", "100")  # fmt: skip
    assert out.startswith("400 records sent, ")
    # Every record in a committed transaction (how many transactions depends on time:
    # tests/unit/test_progress.py checks the cadence on a test clock).
    segment = moldau.data_dir / f"{topic}-0" / "00000000000000000000.log"

    def dump() -> str:
        return _moldau_tool("dump-log", "--files", str(segment), "--print-data-log")

    # The coordinator writes the markers after it answers the last commit.
    assert wait_for(
        lambda: re.search(r"endTxnMarker: COMMIT coordinatorEpoch: \d+$", dump().splitlines()[-1])
    )
    dumped = dump()
    data_batches = [x for x in dumped.splitlines() if "isControl: false" in x]
    assert data_batches and all("isTransactional: true" in x for x in data_batches)
    assert "endTxnMarker: ABORT" not in dumped
    payloads = re.findall(r"payload: (\d+)$", dumped, re.M)
    assert payloads == [str(i) for i in range(400)]
    committed = tmp_path / "committed.properties"
    committed.write_text("isolation.level=read_committed\n")
    consumed = _moldau_tool("perf", "consume", "--bootstrap-server", b, "--topic", topic,
                            "--messages", "400", "--consumer.config", str(committed))  # fmt: skip
    report = _csv(consumed)
    assert int(report["data.consumed.in.nMsg"]) == 400


def test_kafka_configs_broker_defaults_change_every_topics_defaults(
    moldau: BrokerProcess,
) -> None:
    """Kafka's dynamic log configs: a broker property that is a topic default, set for
    the cluster or one broker at run time, is what topics without an override get."""
    b = moldau.bootstrap
    topic = _name("defaults")
    tool(TOPICS, "--bootstrap-server", b, "--create", "--topic", topic, "--partitions", "1")
    (p0,) = describe_topic(b, topic)
    assert (p0.leader, p0.replicas, p0.isr) == (1, (1,), (1,))

    def topic_config(name: str) -> str:
        out = tool(CONFIGS, "--bootstrap-server", b, "--describe", "--entity-type", "topics",
                   "--entity-name", topic, "--all")  # fmt: skip
        return _config_lines(out)[name]

    def send(size: int) -> str:
        done = kafka_java.run(CONSOLE_PRODUCER, "--bootstrap-server", b, "--topic", topic,
                              input="x" * size + "\n")  # fmt: skip
        return done.stdout + done.stderr

    big = "max.message.bytes"
    try:
        tool(CONFIGS, "--bootstrap-server", b, "--alter", "--entity-type", "brokers",
             "--entity-default", "--add-config", "message.max.bytes=1500")  # fmt: skip
        tool(CONFIGS, "--bootstrap-server", b, "--alter", "--entity-type", "brokers",
             "--entity-name", "1", "--add-config", "log.retention.ms=86400000")  # fmt: skip
        assert wait_for(lambda: topic_config(big) == (
            "1500 {DYNAMIC_DEFAULT_BROKER_CONFIG:message.max.bytes=1500, "
            "DEFAULT_CONFIG:message.max.bytes=1048588}"
        ), 20, 0.2)  # fmt: skip
        assert topic_config("retention.ms") == (
            "86400000 {DYNAMIC_BROKER_CONFIG:log.retention.ms=86400000, "
            "DEFAULT_CONFIG:log.retention.hours=168}"
        )
        assert "RecordTooLargeException" in send(3000)
        # Only a topic's primary broker property changes at run time, as on Kafka.
        err = failing_tool(CONFIGS, "--bootstrap-server", b, "--alter", "--entity-type",
                           "brokers", "--entity-default", "--add-config",
                           "log.retention.hours=1")  # fmt: skip
        assert "Cannot update these configs dynamically" in err
    finally:
        tool(CONFIGS, "--bootstrap-server", b, "--alter", "--entity-type", "brokers",
             "--entity-default", "--delete-config", "message.max.bytes")  # fmt: skip
        tool(CONFIGS, "--bootstrap-server", b, "--alter", "--entity-type", "brokers",
             "--entity-name", "1", "--delete-config", "log.retention.ms")  # fmt: skip
    assert wait_for(lambda: topic_config(big).startswith("1048588 "), 20, 0.2)
    assert "RecordTooLargeException" not in send(3000)
    assert offsets(tool(GET_OFFSETS, "--bootstrap-server", b, "--topic", topic)) == {0: 1}
