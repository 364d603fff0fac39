"""Log compaction on a cluster of real broker processes: the cleaner compacts only
what is committed. A value above the high watermark may yet be cut away by a new
leader, so it must not make the cleaner remove the committed value it would
replace (Kafka's cleaner stops at the last stable offset)."""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import Consumer, Message, Producer
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import AdminClient, NewTopic

from moldau.testing.cluster import Cluster

MakeCluster = Callable[..., Cluster]


def read_all(bootstrap: str, topic: str, settle_s: float) -> tuple[list[tuple[int, bytes]], int]:
    """(offset, value) of every record a consumer gets from the start until none has
    come for `settle_s`, and the high watermark it was told."""
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False}
    )
    c.assign([CTP(topic, 0, 0)])
    got: list[tuple[int, bytes]] = []
    try:
        quiet_since = time.monotonic()
        deadline = quiet_since + 30
        while time.monotonic() - quiet_since < settle_s and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append((m.offset(), m.value()))
                quiet_since = time.monotonic()
        return got, c.get_watermark_offsets(CTP(topic, 0), timeout=10)[1]
    finally:
        c.close()


def test_the_cleaner_keeps_a_committed_value_whose_successor_is_not_committed(
    make_cluster: MakeCluster,
) -> None:
    # Sessions and replica lag long enough that paused followers stay in the ISR.
    cluster = make_cluster(
        3,
        **{
            "log.cleaner.backoff.ms": "100",
            "zookeeper.session.timeout.ms": "30000",
            "replica.lag.time.max.ms": "60000",
        },
    )
    topic = "compacted"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    config = {"cleanup.policy": "compact", "segment.bytes": "1024",
              "min.cleanable.dirty.ratio": "0.01"}  # fmt: skip
    admin.create_topics([NewTopic(topic, 1, 3, config=config)])[topic].result(30)
    leader = admin.list_topics(topic, timeout=20).topics[topic].partitions[0].leader
    followers = [b for b in cluster.brokers if b != leader]

    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    p.produce(topic, key=b"K", value=b"v1")
    assert p.flush(30) == 0
    for b in followers:
        cluster.pause(b)
    try:
        # Acknowledged by the leader alone (acks=1): not committed. Enough to roll
        # segments, so that the cleaner has segments below the active one.
        # One record a batch: a batch larger than segment.bytes would be refused.
        solo = Producer(
            {"bootstrap.servers": cluster.brokers[leader].bootstrap, "acks": "1",
             "batch.num.messages": 1}
        )  # fmt: skip
        acked: list[int] = []

        def delivered(err: object, msg: Message) -> None:
            assert err is None, err
            acked.append(msg.offset())

        solo.produce(topic, key=b"K", value=b"v2", on_delivery=delivered)
        for i in range(60):
            solo.produce(topic, key=b"filler-%d" % i, value=b"x" * 10, on_delivery=delivered)
        assert solo.flush(30) == 0
        assert sorted(acked) == list(range(1, 62))
        # The cleaner runs every 100 ms: give it time to do the wrong thing, then read.
        time.sleep(2)
        got, hw = read_all(cluster.brokers[leader].bootstrap, topic, settle_s=1.0)
        assert hw == 1
        assert got == [(0, b"v1")]
    finally:
        for b in followers:
            cluster.resume(b)

    # Once the followers have it all, everything is committed and compacted: v2
    # replaces v1 (the cleaner did run in this set-up).
    def compacted() -> bool:
        got, _ = read_all(cluster.bootstrap, topic, settle_s=0.5)
        return len(got) == 61 and got[0] == (1, b"v2")

    deadline = time.monotonic() + 30
    while not compacted():
        assert time.monotonic() < deadline, "the cleaner never compacted committed records"
