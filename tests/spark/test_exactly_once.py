"""Exactly-once writes (`exactlyOnce=true`): each task writes in a transaction of
its own slot, so a micro-batch Spark runs again, a task retried after its commit,
or a speculative copy running beside it, writes each row once."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import KafkaException

from moldau.spark.exactly_once import (
    TaskSlot,
    ensure_marker_topic,
    new_batch_query_id,
    write_in_transaction,
)
from moldau.spark.options import parse_write_options
from moldau.spark.writer import WriteColumns
from tests.integration.clients import create_topic
from tests.spark.test_read import produce
from tests.spark.test_write import consume_all

pytestmark = pytest.mark.spark

COLUMNS = WriteColumns(key=True, topic=False, partition=False, headers=False)


def rows(prefix: str, n: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {"key": [f"{prefix}{i}" for i in range(n)], "value": [b"v"] * n}
    )


def test_tasks_retried_after_their_commit_and_a_speculative_copy_write_once(
    bootstrap: str, topic_name: str
) -> None:
    """Two tasks of a batch commit, then fail before Spark hears of it: their
    retries find their slots written and write nothing. A speculative copy of a
    task starts while the first attempt is writing: it fences that attempt (whose
    commit then fails) and writes the rows once."""
    create_topic(bootstrap, topic_name, partitions=2)
    options = parse_write_options(
        {
            "kafka.bootstrap.servers": bootstrap,
            "topic": topic_name,
            "exactlyOnce": "true",
            "exactlyOnce.markerTopic": f"{topic_name}-m",
        },
        streaming=True,
    )
    ensure_marker_topic(options.client_config, options.marker_topic, 30)
    query = new_batch_query_id()

    def write(slot: TaskSlot, *batches: pa.RecordBatch) -> int:
        return write_in_transaction(options, COLUMNS, slot, iter(batches))

    for partition in (0, 1):
        slot = TaskSlot(query, topic_name, 0, partition)
        assert write(slot, rows(f"b0p{partition}-", 5)) == 5
        # The task failed after its commit: Spark runs it again.
        assert write(slot, rows(f"b0p{partition}-", 5)) == 0

    slot = TaskSlot(query, topic_name, 1, 0)
    copy_wrote: list[int] = []

    def first_attempt() -> Iterator[pa.RecordBatch]:
        yield rows("b1-", 3)
        # Meanwhile Spark starts a speculative copy of this task, which fences us.
        copy = threading.Thread(target=lambda: copy_wrote.append(write(slot, rows("b1-", 6))))
        copy.start()
        copy.join(60)
        yield pa.RecordBatch.from_pydict({"key": ["b1-3", "b1-4", "b1-5"], "value": [b"v"] * 3})

    with pytest.raises(KafkaException):
        write_in_transaction(options, COLUMNS, slot, first_attempt())
    assert copy_wrote == [6]
    # The next batch of the same slot is written: the bookkeeping moved on.
    assert write(TaskSlot(query, topic_name, 2, 0), rows("b2-", 2)) == 2

    read = consume_all(bootstrap, topic_name, 2, 18, read_committed=True)
    got = Counter(k for _, k, _, _ in read)
    expected = [f"b0p{p}-{i}".encode() for p in (0, 1) for i in range(5)]
    expected += [f"b1-{i}".encode() for i in range(6)] + [b"b2-0", b"b2-1"]
    assert got == Counter(expected)


def copy_stream(
    spark: Any, bootstrap: str, source: str, sink: str, checkpoint: str, **extra: str
) -> None:
    from pyspark import TaskContext
    from pyspark.sql.functions import udf

    @udf("binary")
    def fails_once(value):  # type: ignore[no-untyped-def]  (hints would make it a pandas UDF)
        # The first attempt of every batch's first task fails: Spark retries it.
        context = TaskContext.get()
        if context is not None and context.partitionId() == 0 and context.attemptNumber() == 0:
            raise RuntimeError("injected task failure")
        return value

    df = (
        spark.readStream.format("moldau")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "40")
        .load()
    )
    writer = (
        df.select("key", fails_once("value").alias("value"))
        .writeStream.format("moldau")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("checkpointLocation", checkpoint)
    )
    for k, v in extra.items():
        writer = writer.option(k, v)
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination(180)
    assert query.exception() is None, query.exception()


def forget_last_commit(checkpoint: str) -> None:
    """As if the query died after writing its last batch but before committing it."""
    commits = Path(checkpoint) / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink()


@pytest.mark.parametrize("exactly_once", [True, False])
def test_replayed_batches_and_retried_tasks(
    spark: Any, bootstrap: str, topic_name: str, tmp_path: Path, exactly_once: bool
) -> None:
    source, sink = f"{topic_name}-in", f"{topic_name}-out"
    create_topic(bootstrap, source, partitions=2)
    create_topic(bootstrap, sink, partitions=1)
    produce(bootstrap, source, [(i % 2, b"k%d" % i, b"v%d" % i) for i in range(100)])
    checkpoint = str(tmp_path / "checkpoint")
    options = (
        {"exactlyOnce": "true", "exactlyOnce.markerTopic": f"{topic_name}-m"}
        if exactly_once
        else {}
    )

    copy_stream(spark, bootstrap, source, sink, checkpoint, **options)
    forget_last_commit(checkpoint)
    copy_stream(spark, bootstrap, source, sink, checkpoint, **options)

    expected = Counter((b"k%d" % i, b"v%d" % i) for i in range(100))
    if exactly_once:
        # Read committed: what fenced or failed attempts wrote was aborted.
        got = Counter(
            (k, v) for _, k, v, _ in consume_all(bootstrap, sink, 1, 100, read_committed=True)
        )
        assert got == expected
    else:
        # At-least-once: the replayed batch (the last 20 of batches of 40, 40, 20)
        # is written twice. The retried tasks failed before writing anything.
        got = Counter((k, v) for _, k, v, _ in consume_all(bootstrap, sink, 1, 120))
        assert set(got) == set(expected)
        assert sorted(got.values()) == [1] * 80 + [2] * 20
