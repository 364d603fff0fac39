"""Streaming reads through `spark.readStream.format("moldau")`: micro-batches,
restarts from the checkpoint, replays, new partitions, lost data."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
)

from moldau.testing.process import wait_for
from tests.integration.clients import create_topic
from tests.spark.test_read import produce

SET = AlterConfigOpType.SET

pytestmark = pytest.mark.spark


def stream(spark: Any, bootstrap: str, **options: str) -> Any:
    reader = spark.readStream.format("moldau").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


class Batches:
    """A foreachBatch sink that keeps, per micro-batch id, the (topic, partition,
    offset) of every row, as the driver received them."""

    def __init__(self) -> None:
        self.by_id: dict[int, list[tuple[str, int, int]]] = {}

    def __call__(self, df: Any, batch_id: int) -> None:
        self.by_id[batch_id] = sorted(
            tuple(r) for r in df.select("topic", "partition", "offset").collect()
        )

    def rows(self) -> list[tuple[str, int, int]]:
        return sorted(r for rows in self.by_id.values() for r in rows)


def run_available_now(df: Any, checkpoint: str, sink: Batches) -> Any:
    q = df.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint)
    query = q.trigger(availableNow=True).start()
    query.awaitTermination(120)
    assert not query.isActive
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return query


def every(
    topic: str, partitions: int, per_partition: int, first: int = 0
) -> list[tuple[str, int, int]]:
    return sorted(
        (topic, p, o) for p in range(partitions) for o in range(first, first + per_partition)
    )


def test_available_now_limits_batches_and_resumes_without_gap_or_duplicate(
    spark: Any, bootstrap: str, topic_name: str, checkpoint: str
) -> None:
    create_topic(bootstrap, topic_name, partitions=2)
    produce(bootstrap, topic_name, [(i % 2, b"k", b"v") for i in range(100)])
    limited = {"subscribe": topic_name, "startingOffsets": "earliest", "maxOffsetsPerTrigger": "30"}
    first = Batches()
    q = run_available_now(
        stream(spark, bootstrap, **limited),
        checkpoint,
        first,
    )
    sizes = [len(rows) for _, rows in sorted(first.by_id.items())]
    assert sizes == [30, 30, 30, 10]
    assert first.rows() == every(topic_name, 2, 50)
    end = json.loads(q.lastProgress["sources"][0]["endOffset"])
    assert end == {topic_name: {"0": 50, "1": 50}}

    produce(bootstrap, topic_name, [(i % 2, b"k", b"v") for i in range(40)])
    second = Batches()
    run_available_now(
        stream(spark, bootstrap, **limited),
        checkpoint,
        second,
    )
    assert second.rows() == every(topic_name, 2, 20, first=50)


def test_max_bytes_per_trigger_bounds_each_micro_batch(
    spark: Any, bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    """40 records of 1 KB a partition, at most 30 KB a batch: under 15 records a
    partition each time (the driver's estimate from the log's size: a record and
    its share of its batch's header, over 1 KB), and every record once; with
    maxOffsetsPerTrigger too (30 a partition), the smaller bound wins."""
    create_topic(bootstrap, topic_name, partitions=2)
    produce(bootstrap, topic_name, [(i % 2, b"k", b"v" * 1000) for i in range(80)])
    by_bytes = {"subscribe": topic_name, "startingOffsets": "earliest"}
    by_bytes["maxBytesPerTrigger"] = "30000"
    sink = Batches()
    run_available_now(stream(spark, bootstrap, **by_bytes), str(tmp_path / "a"), sink)
    sizes = [len(rows) for _, rows in sorted(sink.by_id.items())]
    assert len(sizes) >= 3 and all(0 < n <= 30 for n in sizes), sizes
    assert sink.rows() == every(topic_name, 2, 40)

    both = Batches()
    run_available_now(
        stream(spark, bootstrap, **by_bytes, maxOffsetsPerTrigger="60"), str(tmp_path / "b"), both
    )
    assert [len(rows) for _, rows in sorted(both.by_id.items())] == sizes
    assert both.rows() == every(topic_name, 2, 40)


def test_a_replayed_micro_batch_reads_exactly_the_same_records(
    spark: Any, bootstrap: str, topic_name: str, checkpoint: str
) -> None:
    create_topic(bootstrap, topic_name, partitions=2)
    produce(bootstrap, topic_name, [(i % 2, b"k", b"v") for i in range(20)])
    limited = {"subscribe": topic_name, "startingOffsets": "earliest", "maxOffsetsPerTrigger": "8"}
    first = Batches()
    run_available_now(
        stream(spark, bootstrap, **limited),
        checkpoint,
        first,
    )
    last = max(first.by_id)
    # As if the query died after planning its last batch but before committing it:
    # Spark runs that batch again from the offsets it logged.
    (Path(checkpoint) / "commits" / str(last)).unlink()
    (Path(checkpoint) / "commits" / f".{last}.crc").unlink()
    produce(bootstrap, topic_name, [(i % 2, b"k", b"v") for i in range(10)])
    second = Batches()
    run_available_now(
        stream(spark, bootstrap, **limited),
        checkpoint,
        second,
    )
    assert second.by_id[last] == first.by_id[last]
    assert sorted(r for b, rows in second.by_id.items() if b != last for r in rows) == every(
        topic_name, 2, 5, first=10
    )


def test_new_partitions_and_new_topics_matching_the_pattern_are_read(
    spark: Any, bootstrap: str, topic_name: str, checkpoint: str
) -> None:
    create_topic(bootstrap, f"{topic_name}-1", partitions=1)
    produce(bootstrap, f"{topic_name}-1", [(0, b"k", b"v")] * 3)
    pattern = {"subscribePattern": f"{topic_name}-[0-9]", "startingOffsets": "earliest"}
    first = Batches()
    run_available_now(stream(spark, bootstrap, **pattern), checkpoint, first)
    assert first.rows() == every(f"{topic_name}-1", 1, 3)

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(f"{topic_name}-1", 2)])[f"{topic_name}-1"].result(30)
    create_topic(bootstrap, f"{topic_name}-2", partitions=1)
    produce(bootstrap, f"{topic_name}-1", [(1, b"k", b"v")] * 2)
    produce(bootstrap, f"{topic_name}-2", [(0, b"k", b"v")] * 4)
    second = Batches()
    run_available_now(stream(spark, bootstrap, **pattern), checkpoint, second)
    assert second.rows() == sorted(
        [(f"{topic_name}-1", 1, 0), (f"{topic_name}-1", 1, 1), *every(f"{topic_name}-2", 1, 4)]
    )


def test_records_removed_by_retention_fail_the_query_or_are_skipped(
    spark: Any, bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    create_topic(bootstrap, topic_name, partitions=1, **{"segment.bytes": "300"})
    produce(bootstrap, topic_name, [(0, b"k", b"v")] * 5)
    checkpoint = str(tmp_path / "checkpoint")
    first = Batches()
    run_available_now(
        stream(spark, bootstrap, subscribe=topic_name, startingOffsets="earliest"),
        checkpoint,
        first,
    )
    assert first.rows() == every(topic_name, 1, 5)

    for _ in range(3):  # three batches, so three segments (segment.bytes 300)
        produce(bootstrap, topic_name, [(0, b"k", b"v")] * 10)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(
        "topic",
        topic_name,
        incremental_configs=[ConfigEntry("retention.ms", "1", incremental_operation=SET)],
    )
    admin.incremental_alter_configs([resource])[resource].result(30)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe"})

    def log_start() -> int:
        low: int = c.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=10, cached=False)[
            0
        ]
        return low

    try:
        assert wait_for(lambda: log_start() > 5, timeout=30), "retention deleted nothing"
        # Retention back to a week; then records the query can still read.
        resource = ConfigResource(
            "topic",
            topic_name,
            incremental_configs=[
                ConfigEntry("retention.ms", "604800000", incremental_operation=SET)
            ],
        )
        admin.incremental_alter_configs([resource])[resource].result(30)
        time.sleep(1)  # a retention pass that began before the change has ended
        produce(bootstrap, topic_name, [(0, b"k", b"v")] * 3)
        first_kept = log_start()
    finally:
        c.close()

    kept = str(tmp_path / "kept")
    shutil.copytree(checkpoint, kept)
    with pytest.raises(Exception, match="failOnDataLoss"):
        run_available_now(stream(spark, bootstrap, subscribe=topic_name), checkpoint, Batches())

    skipped = Batches()
    run_available_now(
        stream(spark, bootstrap, subscribe=topic_name, failOnDataLoss="false"), kept, skipped
    )
    assert skipped.rows() == every(topic_name, 1, 38 - first_kept, first=first_kept)


def test_a_checkpoint_of_a_query_of_other_topics_is_named_as_such(
    spark: Any, bootstrap: str, topic_name: str, checkpoint: str
) -> None:
    """A query started over the checkpoint of a query of another topic fails
    saying so, not that records of that topic were lost."""
    before, after = f"{topic_name}-before", f"{topic_name}-after"
    for topic in (before, after):
        create_topic(bootstrap, topic, partitions=2)
        produce(bootstrap, topic, [(0, b"k", b"v"), (1, b"k", b"v")])
    run_available_now(
        stream(spark, bootstrap, subscribe=before, startingOffsets="earliest"),
        checkpoint,
        Batches(),
    )
    from pyspark.errors import StreamingQueryException

    with pytest.raises(StreamingQueryException) as failed:
        run_available_now(
            stream(spark, bootstrap, subscribe=after, startingOffsets="earliest"),
            checkpoint,
            Batches(),
        )
    message = str(failed.value)
    assert (
        f"the checkpoint holds offsets of {before}, which this query does not read "
        f"(subscribe={after})"
    ) in message
    assert "new checkpointLocation" in message
    assert "lost" not in message


def test_progress_is_committed_to_a_consumer_group(
    spark: Any, bootstrap: str, topic_name: str, checkpoint: str
) -> None:
    create_topic(bootstrap, topic_name, partitions=2)
    produce(bootstrap, topic_name, [(i % 2, b"k", b"v") for i in range(30)])
    group = f"pipeline-{topic_name}"
    run_available_now(
        stream(
            spark,
            bootstrap,
            subscribe=topic_name,
            startingOffsets="earliest",
            maxOffsetsPerTrigger="20",
            commitToGroup=group,
        ),
        checkpoint,
        Batches(),
    )
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        committed = c.committed([TopicPartition(topic_name, p) for p in range(2)], timeout=10)
    finally:
        c.close()
    assert [(tp.partition, tp.offset) for tp in committed] == [(0, 15), (1, 15)]


def test_ending_offsets_are_refused_on_a_stream(spark: Any, bootstrap: str) -> None:
    with pytest.raises(Exception, match="endingOffsets"):
        run_available_now(
            stream(spark, bootstrap, subscribe="a", endingOffsets="latest"),
            "/nonexistent",
            Batches(),
        )


def test_a_stream_waits_for_records_that_arrive_later(
    spark: Any, bootstrap: str, topic_name: str, checkpoint: str
) -> None:
    create_topic(bootstrap, topic_name, partitions=1)
    sink = Batches()
    df = stream(spark, bootstrap, subscribe=topic_name)  # startingOffsets latest
    query = (
        df.writeStream.foreachBatch(sink)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        assert wait_for(lambda: query.lastProgress is not None, timeout=60)
        produce(bootstrap, topic_name, [(0, b"k", b"v")] * 7)
        assert wait_for(lambda: len(sink.rows()) >= 7, timeout=60)
        time.sleep(1)
        assert sink.rows() == every(topic_name, 1, 7)
    finally:
        query.stop()
