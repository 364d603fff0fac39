"""The Spark source's driver (moldau.spark.metadata.OffsetReader) after a broker is
killed: on ZooKeeper the controller bumps the leader epoch of every partition whose
ISR loses the dead broker, leader or not, and brokers answer a ListOffsets carrying
the old epoch with FENCED_LEADER_EPOCH, as Kafka's do."""

from __future__ import annotations

from collections.abc import Callable

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from moldau.protocol.apis import ApiKey
from moldau.spark.fetch_client import BrokerError, open_connection, parse_bootstrap
from moldau.spark.metadata import OffsetReader
from moldau.testing.cluster import Cluster
from moldau.testing.process import wait_for
from tests.cluster.test_replication import partitions

MakeCluster = Callable[..., Cluster]
RECORDS = 5


def leader_epochs(bootstrap: str, topic: str) -> dict[int, tuple[int, int]]:
    """partition -> (leader, leader epoch) in the first broker's Metadata answer."""
    conn = open_connection(parse_bootstrap(bootstrap)[0], "test", 5.0)
    try:
        md = conn.call(
            ApiKey.METADATA,
            conn.versions[ApiKey.METADATA],
            {"topics": [{"name": topic}], "allow_auto_topic_creation": False},
        )
    finally:
        conn.close()
    return {
        p.partition_index: (p.leader_id, p.leader_epoch) for t in md.topics for p in t.partitions
    }


def test_offsets_are_listed_again_after_a_broker_is_killed(
    make_cluster: MakeCluster, topic_name: str
) -> None:
    cluster = make_cluster(3)
    controller = cluster.wait_for_controller()
    # The victim leads partition 0 and follows in partition 1, whose leader stays.
    victim, other = (b for b in (1, 2, 3) if b != controller)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    assignment = [[victim, other, controller], [other, victim, controller]]
    new = NewTopic(topic_name, num_partitions=2, replica_assignment=assignment)
    admin.create_topics([new])[topic_name].result(timeout=30)
    assert wait_for(
        lambda: all(
            len(isr) == 3 for _, _, isr in partitions(cluster.bootstrap, topic_name).values()
        ),
        30,
    )
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(2 * RECORDS):
        producer.produce(topic_name, b"v", partition=i % 2)
    assert producer.flush(30) == 0

    tps = [(topic_name, 0), (topic_name, 1)]
    reader = OffsetReader(
        {"bootstrap.servers": cluster.bootstrap},
        retries=5,
        retry_interval_s=0.5,
        request_timeout_s=5.0,
    )
    try:
        assert reader.earliest(tps) == dict.fromkeys(tps, 0)  # caches the leaders' epochs
        before = leader_epochs(cluster.bootstrap, topic_name)
        cluster.kill(victim)
        # At once, while partition 0 has no leader: librdkafka answers it with
        # OFFSET_INVALID (-1001) and no error, which is no offset.
        assert reader.earliest(tps) == dict.fromkeys(tps, 0)

        def bumped() -> bool:
            try:
                now = leader_epochs(cluster.bootstrap, topic_name)
            except BrokerError:
                return False
            return now[0][0] not in (victim, -1) and all(now[p][1] > before[p][1] for p in (0, 1))

        assert wait_for(bumped, 30), "no election after the kill"
        assert leader_epochs(cluster.bootstrap, topic_name)[1][0] == other
        assert reader.earliest(tps) == dict.fromkeys(tps, 0)
        assert reader.latest(tps) == dict.fromkeys(tps, RECORDS)
    finally:
        reader.close()
