"""Writes through `df.write.format("moldau")` and `writeStream`, read back with
confluent-kafka."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.integration.clients import create_topic
from tests.spark.test_read import produce

pytestmark = pytest.mark.spark

Record = tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def consume_all(
    bootstrap: str, topic: str, partitions: int, n: int, read_committed: bool = False
) -> list[Record]:
    """(partition, key, value, headers) of the first n records, by partition and offset."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{topic}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed" if read_committed else "read_uncommitted",
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[tuple[int, int, Record]] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            got.append(
                (m.partition(), m.offset(), (m.partition(), m.key(), m.value(), m.headers() or []))
            )
        extra = c.poll(1.0)  # nothing more than n
        assert extra is None, f"more than {n} records: {extra.offset()}"
    finally:
        c.close()
    return [r for _, _, r in sorted(got)]


def test_batch_write_with_every_column(spark: Any, bootstrap: str, topic_name: str) -> None:
    create_topic(bootstrap, topic_name, partitions=3)
    df = spark.createDataFrame(
        [
            ("k0", b"v0", topic_name, 0, [("h", b"x"), ("nil", None)]),
            (None, b"v1", topic_name, 1, None),
            ("k2", None, topic_name, 2, []),
            ("k3", b"v3", topic_name, 0, None),
        ],
        "key string, value binary, topic string, partition int, "
        "headers array<struct<key:string,value:binary>>",
    )
    df.write.format("moldau").option("kafka.bootstrap.servers", bootstrap).mode("append").save()
    # Rows of different tasks land in any order.
    got = sorted(consume_all(bootstrap, topic_name, 3, 4), key=lambda r: (r[0], r[1] or b""))
    assert got == [
        (0, b"k0", b"v0", [("h", b"x"), ("nil", None)]),
        (0, b"k3", b"v3", []),
        (1, None, b"v1", []),
        (2, b"k2", None, []),
    ]


def test_the_topic_option_wins_over_the_topic_column(
    spark: Any, bootstrap: str, topic_name: str
) -> None:
    create_topic(bootstrap, topic_name)
    df = spark.createDataFrame(
        [("elsewhere", "a"), ("elsewhere", "b")], "topic string, value string"
    )
    (
        df.write.format("moldau")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic_name)
        .mode("append")
        .save()
    )
    assert sorted(v for _, _, v, _ in consume_all(bootstrap, topic_name, 1, 2)) == [b"a", b"b"]


def test_a_dataframe_read_from_one_topic_is_written_to_another(
    spark: Any, bootstrap: str, topic_name: str
) -> None:
    source, sink = f"{topic_name}-in", f"{topic_name}-out"
    create_topic(bootstrap, source, partitions=2)
    create_topic(bootstrap, sink, partitions=2)
    produce(bootstrap, source, [(i % 2, b"k%d" % i, b"v%d" % i) for i in range(1000)])
    df = (
        spark.read.format("moldau")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .load()
    )
    (
        df.select("key", "value", "partition")
        .write.format("moldau")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .mode("append")
        .save()
    )
    got = consume_all(bootstrap, sink, 2, 1000)
    assert sorted((p, k, v) for p, k, v, _ in got) == sorted(
        (i % 2, b"k%d" % i, b"v%d" % i) for i in range(1000)
    )


def test_stream_write_copies_a_topic(
    spark: Any, bootstrap: str, topic_name: str, checkpoint: str
) -> None:
    source, sink = f"{topic_name}-in", f"{topic_name}-out"
    create_topic(bootstrap, source, partitions=2)
    create_topic(bootstrap, sink, partitions=1)
    produce(bootstrap, source, [(i % 2, b"k%d" % i, b"v%d" % i) for i in range(50)])
    df = (
        spark.readStream.format("moldau")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "20")
        .load()
    )
    query = (
        df.select("key", "value")
        .writeStream.format("moldau")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    got = consume_all(bootstrap, sink, 1, 50)
    assert sorted((k, v) for _, k, v, _ in got) == sorted(
        (b"k%d" % i, b"v%d" % i) for i in range(50)
    )


@pytest.mark.parametrize(
    ("schema", "row", "options", "mode", "message"),
    [
        ("key string", ("k",), {"topic": "t"}, "append", "Required attribute 'value' not found"),
        ("key int, value string", (1, "v"), {"topic": "t"}, "append", "key attribute type"),
        ("value string, partition string", ("v", "0"), {"topic": "t"}, "append", "partition"),
        ("value string", ("v",), {}, "append", "topic option required"),
        ("value string", ("v",), {"topic": "t"}, "overwrite", "Save mode Overwrite"),
        (
            "value string",
            ("v",),
            {"topic": "t", "kafka.value.serializer": "x"},
            "append",
            "serializer",
        ),
        ("value string", ("v",), {"topic": "t", "subscribe": "x"}, "append", "subscribe"),
        # On both write paths alike, as Spark's connector says it.
        ("topic string, value string", (None, "v"), {}, "append", "null topic present"),
        (
            "topic string, value string",
            (None, "v"),
            {"writePath": "client"},
            "append",
            "null topic present",
        ),
    ],
)
def test_bad_writes_fail_naming_the_problem(
    spark: Any,
    bootstrap: str,
    schema: str,
    row: tuple[Any, ...],
    options: dict[str, str],
    mode: str,
    message: str,
) -> None:
    writer = spark.createDataFrame([row], schema).write.format("moldau")
    writer = writer.option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        writer = writer.option(k, v)
    with pytest.raises(Exception, match=message):
        writer.mode(mode).save()


def consume_stamped(bootstrap: str, topic: str, partitions: int, n: int) -> list[Any]:
    """(partition, key, value, headers, (timestamp type, timestamp)) of n records."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}"})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[Any] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None:
                assert m.error() is None, m.error()
                got.append((m.partition(), m.key(), m.value(), m.headers(), m.timestamp()))
        assert c.poll(1.0) is None, f"more than {n} records"
    finally:
        c.close()
    return got


def test_the_batch_path_writes_what_the_client_path_writes(
    spark: Any, bootstrap: str, topic_name: str
) -> None:
    """Rows to two topics by a topic column, keys to murmur2's partitions, a
    partition column's rows to theirs, keyless rows anywhere, null keys and values
    kept, headers (null values, several, none), lz4-compressed, CreateTime stamps of
    the write's time: on both paths alike."""
    from pyspark.sql import functions as F

    n = 3000
    rows = [
        (
            None if i % 7 == 0 else f"key-{i}",
            # (key, value) names a row: no row has neither.
            None if i % 11 == 0 and i % 7 else b"value-%d" % i,
            i % 4 if i % 5 == 0 else None,
            None if i % 4 == 0 else [("h", b"%d" % i), ("nil", None)][: i % 3],
            "ab"[i % 2],
        )
        for i in range(n)
    ]
    df = spark.createDataFrame(
        rows,
        "key string, value binary, partition int, "
        "headers array<struct<key:string,value:binary>>, dest string",
    ).repartition(2)
    written = {}
    for path in ("client", "batch"):
        topics = {d: f"{topic_name}-{path}-{d}" for d in "ab"}
        for topic in topics.values():
            create_topic(bootstrap, topic, partitions=4)
        before = int(time.time() * 1000)
        (
            df.withColumn("topic", F.concat(F.lit(f"{topic_name}-{path}-"), "dest"))
            .drop("dest")
            .write.format("moldau")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("kafka.compression.type", "lz4")
            .option("writePath", path)
            .mode("append")
            .save()
        )
        after = int(time.time() * 1000)
        got = [
            (d, *r)
            for d, topic in topics.items()
            for r in consume_stamped(bootstrap, topic, 4, n // 2)
        ]
        assert {stamp[0] for *_, stamp in got} == {1}  # CreateTime
        assert all(before <= stamp[1] <= after for *_, stamp in got)
        written[path] = got
    client, batch = written["client"], written["batch"]
    # Rows with a key or a partition land alike; keyless ones may land anywhere.
    placed = {
        (f"key-{i}".encode() if k else None, v)
        for i, (k, v, p, _, _) in enumerate(rows)
        if k or p is not None
    }

    def where(got: list[Any]) -> list[Any]:
        return sorted(((r[2], r[3], r[0], r[1]) for r in got if (r[2], r[3]) in placed), key=repr)

    def contents(got: list[Any]) -> list[Any]:
        return sorted(((r[0], r[2], r[3], r[4]) for r in got), key=repr)

    assert len(where(batch)) == len(placed)
    assert where(batch) == where(client)
    assert contents(batch) == contents(client)
    assert contents(batch) == sorted(
        ((d, k and k.encode(), v, hs or None) for k, v, _, hs, d in rows), key=repr
    )
    # The batch path stamps each Arrow batch's records of a partition alike (a task
    # here has one Arrow batch): it did write these, it did not fall back.
    for d in "ab":
        for p in range(4):
            assert len({r[5][1] for r in batch if r[:2] == (d, p)}) <= 2


def test_the_batch_paths_compressed_batches_read_back(bootstrap: str, topic_name: str) -> None:
    """Each codec's batches, with headers, taken by Moldau and read by confluent-kafka,
    a partition a codec (no Spark: the task's writer in this process)."""
    import pyarrow as pa

    from moldau.spark.batch_writer import BatchWriter

    codecs = ["gzip", "snappy", "lz4", "zstd"]
    create_topic(bootstrap, topic_name, partitions=len(codecs))
    header_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    for p, codec in enumerate(codecs):
        writer = BatchWriter(
            {"bootstrap.servers": bootstrap, "compression.type": codec}, topic_name
        )
        writer.write(
            pa.record_batch(
                [
                    pa.array([p] * 500, pa.int32()),
                    pa.array([b"v%d" % i + b"x" * 100 for i in range(500)]),
                    pa.array([[("h", codec.encode()), ("n", None)]] * 500, header_type),
                ],
                names=["partition", "value", "headers"],
            )
        )
        writer.close()
    assert consume_all(bootstrap, topic_name, len(codecs), 500 * len(codecs)) == [
        (p, None, b"v%d" % i + b"x" * 100, [("h", codec.encode()), ("n", None)])
        for p, codec in enumerate(codecs)
        for i in range(500)
    ]


def test_the_batch_path_sends_large_arrow_batches_in_order(bootstrap: str, topic_name: str) -> None:
    """Arrow batches of 10 MB (10,000 rows of 1 KiB) go as batches under the
    broker's max.message.bytes, several requests in flight on one connection, and
    come back whole and in order (no Spark: the task's writer in this process)."""
    import pyarrow as pa

    from moldau.spark.batch_writer import BatchWriter

    create_topic(bootstrap, topic_name, partitions=2)
    writer = BatchWriter({"bootstrap.servers": bootstrap}, topic_name)
    for start in range(0, 30_000, 10_000):
        ids = range(start, start + 10_000)
        writer.write(
            pa.record_batch(
                [
                    pa.array([i % 2 for i in ids], pa.int32()),
                    pa.array([b"%06d" % i + b"x" * 1018 for i in ids], pa.binary()),
                ],
                names=["partition", "value"],
            )
        )
    writer.close()
    got = consume_all(bootstrap, topic_name, 2, 30_000)
    assert [(p, v[:6]) for p, _, v, _ in got] == [
        (p, b"%06d" % i) for p in (0, 1) for i in range(p, 30_000, 2)
    ]


def test_the_batch_path_writes_to_a_topic_the_broker_creates(
    bootstrap: str, topic_name: str
) -> None:
    """A topic that does not exist yet is made by the broker (auto.create.topics.enable),
    as for the client path's producer."""
    import pyarrow as pa

    from moldau.spark.batch_writer import BatchWriter

    writer = BatchWriter(
        {"bootstrap.servers": bootstrap, "delivery.timeout.ms": "20000"}, topic_name
    )
    writer.write(pa.record_batch([pa.array([b"v"], pa.binary())], names=["value"]))
    writer.close()
    assert [v for _, _, v, _ in consume_all(bootstrap, topic_name, 1, 1)] == [b"v"]
