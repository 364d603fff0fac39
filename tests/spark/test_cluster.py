"""The data source on a replicated cluster (three broker processes on ZooKeeper,
replication factor 3): a leader killed with SIGKILL while a streaming query reads
costs it neither a record nor a duplicate, nor does its byte bound (the partitions'
sizes asked of their leaders) fail it."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from moldau.spark.fetch_client import parse_bootstrap
from moldau.spark.log_sizes import log_extents
from moldau.testing.process import wait_for
from tests.cluster.test_replication import partitions
from tests.spark.test_read import produce
from tests.spark.test_stream import Batches, every

pytestmark = pytest.mark.spark

RECORDS_PER_PARTITION = 4000


def test_a_leader_killed_mid_read_costs_no_record(
    spark: Any, make_cluster: Any, topic_name: str, checkpoint: str
) -> None:
    cluster = make_cluster(3)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    new = NewTopic(topic_name, 3, 3, config={"min.insync.replicas": "2"})
    admin.create_topics([new])[topic_name].result(timeout=30)
    assert wait_for(
        lambda: all(
            len(isr) == 3 for _, _, isr in partitions(cluster.bootstrap, topic_name).values()
        ),
        30,
    )
    produce(
        cluster.bootstrap,
        topic_name,
        [(i % 3, b"k", b"v") for i in range(3 * RECORDS_PER_PARTITION)],
    )

    sink = Batches()
    df = (
        spark.readStream.format("moldau")
        .option("kafka.bootstrap.servers", cluster.bootstrap)
        .option("subscribe", topic_name)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "1000")
        # Binds no batch of these 10-byte records; the leaders are asked every batch.
        .option("maxBytesPerTrigger", str(100 * 1024 * 1024))
        .load()
    )
    query = (
        df.writeStream.foreachBatch(sink)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert wait_for(lambda: len(sink.by_id) >= 2, timeout=120), "the query read nothing"
        leader = partitions(cluster.bootstrap, topic_name)[0][0]
        cluster.kill(leader)
        query.awaitTermination(240)
        assert not query.isActive, "the query did not finish"
        assert query.exception() is None, query.exception()
    finally:
        query.stop()
    assert len(sink.by_id) >= 12
    assert sink.rows() == every(topic_name, 3, RECORDS_PER_PARTITION)

    # Each partition's size and offsets from its leader, wherever it is now.
    tps = [(topic_name, p) for p in range(3)]
    extents = log_extents(parse_bootstrap(cluster.bootstrap), tps)
    assert sorted(extents) == tps
    for e in extents.values():
        assert (e.start, e.end) == (0, RECORDS_PER_PARTITION)
        assert e.size > RECORDS_PER_PARTITION * 8, extents
