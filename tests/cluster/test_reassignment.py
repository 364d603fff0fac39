"""Partition reassignment (KIP-455) with real brokers and a real client of the APIs
(kafka-python's AlterPartitionReassignments / ListPartitionReassignments), under
acks=all load: the records move to the new replicas, the old ones are deleted,
nothing acknowledged is lost."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from kafka import TopicPartition as KTP
from kafka.admin import KafkaAdminClient

from moldau.metadata.znodes import decode_topic
from moldau.testing.local import LocalCluster
from moldau.testing.process import wait_for
from tests.cluster.test_replication import LAG_MS, Load, MakeCluster, partitions, verify


@pytest.fixture
def local_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path / "cluster", 3, {"replica.lag.time.max.ms": str(LAG_MS)}) as c:
        yield c


def test_a_topic_moves_to_other_brokers_under_load(
    local_cluster: LocalCluster, topic_name: str
) -> None:
    cluster = local_cluster
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    # Deleted logs are renamed *-delete and removed after file.delete.delay.ms.
    new = NewTopic(
        topic_name,
        num_partitions=2,
        replica_assignment=[[1, 2], [2, 1]],
        config={"file.delete.delay.ms": "100"},
    )
    admin.create_topics([new])[topic_name].result(timeout=30)
    assert wait_for(
        lambda: all(
            len(isr) == 2 for _, _, isr in partitions(cluster.bootstrap, topic_name).values()
        ),
        20,
    )
    reassign = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        with Load(cluster.bootstrap, topic_name, idempotent=True) as load:
            assert load.grows()
            p0, p1 = KTP(topic_name, 0), KTP(topic_name, 1)
            results = reassign.alter_partition_reassignments({p0: [2, 3], p1: [3, 2]})
            assert results == {p0: None, p1: None}

            def done() -> bool:
                return not reassign.list_partition_reassignments()

            assert wait_for(done, 30)
            assert load.grows()
        got = partitions(cluster.bootstrap, topic_name)
        assert (got[0][1], got[1][1]) == ([2, 3], [2, 3])
        assert got[0][0] in (2, 3) and got[1][0] in (2, 3)
        stored = cluster.znode(f"/brokers/topics/{topic_name}")
        assert stored is not None
        topic = decode_topic(stored)
        assert (topic.partitions, topic.adding_replicas) == ({0: [2, 3], 1: [3, 2]}, {})
        assert wait_for(lambda: not list(cluster.data_dir(1).glob(f"{topic_name}-*")), 10)
        # The new replicas hold everything: with broker 2 gone, 3 serves it all.
        cluster.kill(2)
        assert wait_for(
            lambda: all(
                lead == 3 for lead, _, _ in partitions(cluster.bootstrap, topic_name).values()
            ),
            20,
        )
        verify(load, cluster.bootstrap, topic_name, idempotent=True)
    finally:
        reassign.close()


def reassign(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "moldau", "reassign-partitions", "--bootstrap-server", bootstrap,
         *args],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_a_controller_killed_mid_reassignment_and_the_next_one_finishes_it(
    make_cluster: MakeCluster, topic_name: str, tmp_path: Path
) -> None:
    """Brokers on ZooKeeper, driven by `moldau reassign-partitions`: a throttle holds
    the new replica behind while the controller, which also leads the partitions and
    is leaving them, is killed. The next controller reads the half-done reassignment
    from the topic znode and, once the throttle is lifted and the new replica has
    caught up, finishes it; nothing acknowledged is lost."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    cluster = make_cluster(3, **{"replica.lag.time.max.ms": str(LAG_MS)})
    controller = cluster.controller_id()
    assert controller is not None
    stays, joins = [b for b in (1, 2, 3) if b != controller]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    new = NewTopic(topic_name, num_partitions=2, replica_assignment=[[controller, stays]] * 2)
    admin.create_topics([new])[topic_name].result(timeout=30)
    assert wait_for(
        lambda: all(
            len(isr) == 2 for _, _, isr in partitions(cluster.bootstrap, topic_name).values()
        ),
        20,
    )
    # More than one fetch of data: at 10 kB/s the new replica stays behind.
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 20})
    for i in range(40_000):
        producer.produce(topic_name, b"x" * 100, partition=i % 2)
    assert producer.flush(30) == 0
    target = [stays, joins]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic_name, "partition": p, "replicas": target} for p in (0, 1)
    ]}))  # fmt: skip
    with Load(cluster.bootstrap, topic_name, idempotent=True) as load:
        assert load.grows()
        started = reassign(cluster.bootstrap, "--execute", "--reassignment-json-file", str(plan),
                           "--throttle", "10000")  # fmt: skip
        assert started.returncode == 0, started.stdout + started.stderr
        assert started.stdout.endswith(
            f"Successfully started partition reassignments for {topic_name}-0,{topic_name}-1\n"
        )
        listed = reassign(cluster.bootstrap, "--list").stdout.splitlines()
        assert listed == [
            "Current partition reassignments:",
            *(f"{topic_name}-{p}: replicas: {stays},{joins},{controller}. adding: {joins}. "
              f"removing: {controller}." for p in (0, 1)),
        ]  # fmt: skip
        cluster.kill(controller)
        assert wait_for(lambda: cluster.controller_id() in (stays, joins), 30)
        assert load.grows()
        still = reassign(cluster.bootstrap, "--list").stdout
        assert f"{topic_name}-0: replicas: {stays},{joins},{controller}. adding: {joins}." in still
        # Lift the throttle on the brokers that live (the dead one cannot be asked).
        live = ",".join(cluster.brokers[b].bootstrap for b in (stays, joins))
        survivors = AdminClient({"bootstrap.servers": live})
        for broker in (stays, joins):
            res = ConfigResource(ConfigResource.Type.BROKER, str(broker), incremental_configs=[
                ConfigEntry(rate, None, incremental_operation=AlterConfigOpType.DELETE)
                for rate in ("leader.replication.throttled.rate",
                             "follower.replication.throttled.rate")
            ])  # fmt: skip
            survivors.incremental_alter_configs([res])[res].result(10)

        def completed() -> bool:
            out = reassign(cluster.bootstrap, "--verify", "--reassignment-json-file", str(plan),
                           "--preserve-throttles")  # fmt: skip
            return out.stdout.count("is completed.") == 2

        assert wait_for(completed, 60, interval=0.5)
        assert load.grows()
    data = cluster.znode(f"/brokers/topics/{topic_name}")
    assert data is not None
    topic = decode_topic(data)
    assert (topic.partitions, topic.adding_replicas, topic.removing_replicas) == (
        {0: target, 1: target}, {}, {},
    )  # fmt: skip
    # The new replicas have it all: with the one that stayed gone, `joins` serves it.
    cluster.kill(stays)
    assert wait_for(
        lambda: all(
            lead == joins for lead, _, _ in partitions(cluster.bootstrap, topic_name).values()
        ),
        30,
    )
    verify(load, cluster.bootstrap, topic_name, idempotent=True)


def test_a_throttled_reassignment_copies_slowly_until_the_throttle_is_raised(
    local_cluster: LocalCluster, topic_name: str, tmp_path: Path
) -> None:
    """--throttle sets Kafka's throttle configs (rates on the brokers, throttled
    replicas on the topic); the new replica then gets no more than that rate, until
    a new --throttle lifts it; --verify clears them once the move is done."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import ConfigResource

    cluster = local_cluster
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    new = NewTopic(topic_name, num_partitions=1, replica_assignment=[[1]])
    admin.create_topics([new])[topic_name].result(timeout=30)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 20})
    for _ in range(60_000):
        producer.produce(topic_name, b"x" * 100, partition=0)
    assert producer.flush(30) == 0
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic_name, "partition": 0, "replicas": [2]}
    ]}))  # fmt: skip
    started = reassign(cluster.bootstrap, "--execute", "--reassignment-json-file", str(plan),
                       "--throttle", "100000")  # fmt: skip
    assert started.returncode == 0, started.stdout + started.stderr
    assert "The inter-broker throttle limit was set to 100000 B/s" in started.stdout

    def config(restype: ConfigResource.Type, name: str, key: str) -> str:
        res = ConfigResource(restype, name)
        return str(admin.describe_configs([res])[res].result(10)[key].value)

    assert config(ConfigResource.Type.BROKER, "2", "follower.replication.throttled.rate") == (
        "100000"
    )
    assert config(
        ConfigResource.Type.TOPIC, topic_name, "leader.replication.throttled.replicas"
    ) == ("0:1")
    time.sleep(2)  # at 100 kB/s, far less than the 6 MB is copied by now
    listed = reassign(cluster.bootstrap, "--list").stdout
    assert f"{topic_name}-0: replicas: 2,1. adding: 2. removing: 1." in listed
    copied = sum(f.stat().st_size for f in cluster.data_dir(2).glob(f"{topic_name}-0/*.log"))
    assert copied < 4_000_000

    lifted = reassign(cluster.bootstrap, "--execute", "--additional", "--reassignment-json-file",
                      str(plan), "--throttle", "1000000000")  # fmt: skip
    assert lifted.returncode == 0, lifted.stdout + lifted.stderr

    def completed() -> bool:
        out = reassign(cluster.bootstrap, "--verify", "--reassignment-json-file", str(plan))
        return f"Reassignment of partition {topic_name}-0 is completed." in out.stdout

    assert wait_for(completed, 30, interval=0.5)
    assert config(ConfigResource.Type.BROKER, "2", "follower.replication.throttled.rate") == (
        str(2**63 - 1)
    )
