"""Topic deletion on a cluster (Kafka's TopicDeletionManager), on three broker
processes and a real ZooKeeper: a broker that is down holds the deletion, which
finishes when it returns; the name can then be used again for an empty topic."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from moldau.testing.cluster import Cluster
from moldau.testing.process import wait_for
from tests.cluster.test_replication import partitions

MakeCluster = Callable[..., Cluster]


def partition_dirs(data_dir: Path, topic: str) -> list[str]:
    return sorted(p.name for p in data_dir.glob(f"{topic}-*") if p.is_dir())


def topic_id(admin: AdminClient, topic: str) -> str:
    from confluent_kafka import TopicCollection

    described = admin.describe_topics(TopicCollection([topic]))[topic].result(timeout=20)
    return str(described.topic_id)


class DeletionCluster(Protocol):
    """What the scenario needs of a cluster: Cluster (processes on ZooKeeper) and
    LocalCluster (brokers in this process) both have it."""

    @property
    def bootstrap(self) -> str: ...
    def stop(self, broker_id: int) -> object: ...
    def restart(self, broker_id: int) -> None: ...
    def data_dir(self, broker_id: int) -> Path: ...
    def znode(self, path: str) -> bytes | None: ...


def test_a_topic_deleted_while_a_broker_is_down_is_gone_everywhere_once_it_returns(
    make_cluster: MakeCluster, topic_name: str
) -> None:
    deletion_while_a_broker_is_down(make_cluster(3), topic_name)


def deletion_while_a_broker_is_down(cluster: DeletionCluster, topic_name: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    # Deleted logs are renamed *-delete and removed after file.delete.delay.ms.
    fast = {"file.delete.delay.ms": "100"}
    admin.create_topics([NewTopic(topic_name, 2, 3, config=fast)])[topic_name].result(timeout=30)
    assert wait_for(
        lambda: all(
            len(isr) == 3 for _, _, isr in partitions(cluster.bootstrap, topic_name).values()
        ),
        30,
    )
    first_id = topic_id(admin, topic_name)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(20):
        producer.produce(topic_name, b"old-%d" % i, partition=i % 2)
    assert producer.flush(30) == 0
    dirs = [f"{topic_name}-0", f"{topic_name}-1"]
    for b in (1, 2, 3):
        assert partition_dirs(cluster.data_dir(b), topic_name) == dirs

    # Broker 3 is down: it cannot stop its replicas, so the deletion waits for it.
    cluster.stop(3)
    survivors = AdminClient({"bootstrap.servers": cluster.bootstrap})
    survivors.delete_topics([topic_name])[topic_name].result(timeout=30)
    assert topic_name not in survivors.list_topics(timeout=20).topics
    for b in (1, 2):
        assert wait_for(lambda b=b: not partition_dirs(cluster.data_dir(b), topic_name), 20)
    assert partition_dirs(cluster.data_dir(3), topic_name) == dirs
    assert cluster.znode(f"/admin/delete_topics/{topic_name}") is not None
    again = survivors.create_topics([NewTopic(topic_name, 1, 1)])[topic_name]
    with pytest.raises(KafkaException, match="marked for deletion") as refused:
        again.result(timeout=30)
    assert refused.value.args[0].name() == "TOPIC_ALREADY_EXISTS"

    # Broker 3 returns: the deletion resumes and finishes there too.
    cluster.restart(3)
    assert wait_for(lambda: not partition_dirs(cluster.data_dir(3), topic_name), 30)
    assert wait_for(lambda: cluster.znode(f"/brokers/topics/{topic_name}") is None, 20)
    assert cluster.znode(f"/admin/delete_topics/{topic_name}") is None

    # The same name is a new, empty topic with a new id.
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic_name, num_partitions=2, replication_factor=3)])[
        topic_name
    ].result(timeout=30)
    assert topic_id(admin, topic_name) != first_id
    consumer = Consumer(
        {"bootstrap.servers": cluster.bootstrap, "group.id": "none", "enable.auto.commit": False}
    )
    try:
        for p in (0, 1):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic_name, p), timeout=20)
            assert (low, high) == (0, 0)
    finally:
        consumer.close()
    # A new producer: librdkafka keeps the old topic's leader epochs across the
    # re-creation and ignores the new topic's leaders (librdkafka issue 4898; Kafka
    # brokers start the new topic's epochs at 0 too).
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    producer.produce(topic_name, b"new", partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "reader",
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.assign([TopicPartition(topic_name, 0, 0)])
        got = None
        for _ in range(30):
            m = consumer.poll(1.0)
            if m is not None and m.error() is None:
                got = m
                break
        assert got is not None
        assert (got.offset(), got.value()) == (0, b"new")
    finally:
        consumer.close()


def test_delete_topic_enable_false_refuses_deletion(
    make_cluster: MakeCluster, topic_name: str
) -> None:
    cluster = make_cluster(1, **{"delete.topic.enable": "false"})
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(timeout=30)
    with pytest.raises(KafkaException) as refused:
        admin.delete_topics([topic_name])[topic_name].result(timeout=30)
    assert refused.value.args[0].name() == "TOPIC_DELETION_DISABLED"
    assert topic_name in admin.list_topics(timeout=20).topics
    assert partition_dirs(cluster.brokers[1].data_dir, topic_name) == [f"{topic_name}-0"]
