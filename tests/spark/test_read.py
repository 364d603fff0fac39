"""Batch reads through `spark.read.format("moldau")`, checked record by record
against what a confluent-kafka producer wrote."""

from __future__ import annotations

import datetime as dt
import json
import time
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions

from tests.integration.clients import create_topic

pytestmark = pytest.mark.spark

# ms, the first record's CreateTime: an hour ago, well inside the retention time
# (the tests' broker enforces retention every half second).
T0 = (int(time.time()) - 3600) * 1000


def produce(bootstrap: str, topic: str, rows: list[tuple[int, bytes | None, bytes | None]]) -> None:
    """(partition, key, value) rows; record i gets CreateTime T0 + i * 1000 and,
    for even i, two headers."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i, (partition, key, value) in enumerate(rows):
        headers = [("h", b"v%d" % i), ("n", None)] if i % 2 == 0 else None
        p.produce(topic, value, key, partition=partition, timestamp=T0 + i * 1000, headers=headers)
    assert p.flush(30) == 0


def read(spark: Any, bootstrap: str, **options: str) -> Any:
    reader = spark.read.format("moldau").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def rows_of(df: Any) -> list[tuple[Any, ...]]:
    return sorted(
        tuple(r) for r in df.select("topic", "partition", "offset", "key", "value").collect()
    )


@pytest.fixture
def topic3(bootstrap: str, topic_name: str) -> str:
    """12 records over 3 partitions, 4 each, some with null keys or values."""
    create_topic(bootstrap, topic_name, partitions=3)
    rows = [
        (i % 3, None if i == 4 else b"k%d" % i, None if i == 7 else b"v%d" % i) for i in range(12)
    ]
    produce(bootstrap, topic_name, rows)
    return topic_name


def test_batch_read_gives_every_record_with_its_fields(
    spark: Any, bootstrap: str, topic3: str
) -> None:
    df = read(spark, bootstrap, subscribe=topic3, includeHeaders="true")
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("key", "binary"),
        ("value", "binary"),
        ("topic", "string"),
        ("partition", "int"),
        ("offset", "bigint"),
        ("timestamp", "timestamp"),
        ("timestampType", "int"),
        ("headers", "array<struct<key:string,value:binary>>"),
    ]
    got = sorted(df.collect(), key=lambda r: (r.partition, r.offset))
    expected = []
    for partition in range(3):
        for offset, i in enumerate(range(partition, 12, 3)):
            headers = [("h", b"v%d" % i), ("n", None)] if i % 2 == 0 else None
            expected.append(
                (
                    None if i == 4 else b"k%d" % i,
                    None if i == 7 else b"v%d" % i,
                    topic3,
                    partition,
                    offset,
                    dt.datetime.fromtimestamp((T0 + i * 1000) / 1000, dt.UTC).replace(tzinfo=None),
                    0,  # CreateTime, Kafka's id for it
                    headers,
                )
            )
    as_tuples = [
        (
            r.key and bytes(r.key),
            r.value and bytes(r.value),
            r.topic,
            r.partition,
            r.offset,
            r.timestamp,
            r.timestampType,
            None if r.headers is None else [(h.key, h.value and bytes(h.value)) for h in r.headers],
        )
        for r in got
    ]
    assert as_tuples == expected


def test_without_include_headers_there_is_no_headers_column(
    spark: Any, bootstrap: str, topic3: str
) -> None:
    df = read(spark, bootstrap, subscribe=topic3)
    assert "headers" not in df.columns
    assert df.count() == 12


def test_offsets_json_bounds_and_assign(spark: Any, bootstrap: str, topic3: str) -> None:
    df = read(
        spark,
        bootstrap,
        subscribe=topic3,
        startingOffsets=json.dumps({topic3: {"0": 1, "1": -2, "2": 3}}),
        endingOffsets=json.dumps({topic3: {"0": 3, "1": -1, "2": 4}}),
    )
    got = {(t, p, o) for t, p, o, _, _ in rows_of(df)}
    assert got == {(topic3, 0, 1), (topic3, 0, 2)} | {(topic3, 1, o) for o in range(4)} | {
        (topic3, 2, 3)
    }

    df = read(spark, bootstrap, assign=json.dumps({topic3: [2]}))
    assert {(p, o) for _, p, o, _, _ in rows_of(df)} == {(2, o) for o in range(4)}


def test_subscribe_pattern_finds_every_matching_topic(
    spark: Any, bootstrap: str, topic_name: str
) -> None:
    for suffix in ("a", "b", "other"):
        create_topic(bootstrap, f"{topic_name}-{suffix}")
        produce(bootstrap, f"{topic_name}-{suffix}", [(0, b"k", suffix.encode())])
    df = read(spark, bootstrap, subscribePattern=f"{topic_name}-[ab]")
    assert sorted(bytes(r.value) for r in df.collect()) == [b"a", b"b"]


def test_timestamps_choose_where_reads_start_and_end(
    spark: Any, bootstrap: str, topic3: str
) -> None:
    # Partition 0 holds records 0, 3, 6, 9 (CreateTime T0 + i s).
    df = read(spark, bootstrap, assign=json.dumps({topic3: [0]}), startingTimestamp=str(T0 + 3000))
    assert [o for _, _, o, _, _ in rows_of(df)] == [1, 2, 3]

    df = read(
        spark,
        bootstrap,
        assign=json.dumps({topic3: [0]}),
        startingOffsetsByTimestamp=json.dumps({topic3: {"0": T0 + 2500}}),
        endingOffsetsByTimestamp=json.dumps({topic3: {"0": T0 + 9000}}),
    )
    assert [o for _, _, o, _, _ in rows_of(df)] == [1, 2]

    # No record that late: an error by default, the end with strategy latest.
    late = json.dumps({topic3: {"0": T0 + 10**9}})
    with pytest.raises(Exception, match="timestamp at or after"):
        read(
            spark, bootstrap, assign=json.dumps({topic3: [0]}), startingOffsetsByTimestamp=late
        ).count()
    df = read(
        spark,
        bootstrap,
        assign=json.dumps({topic3: [0]}),
        startingOffsetsByTimestamp=late,
        startingOffsetsByTimestampStrategy="latest",
    )
    assert df.count() == 0


def test_min_partitions_splits_the_work(spark: Any, bootstrap: str, topic3: str) -> None:
    df = read(spark, bootstrap, subscribe=topic3)
    assert df.rdd.getNumPartitions() == 3
    df = read(spark, bootstrap, subscribe=topic3, minPartitions="6")
    assert df.rdd.getNumPartitions() == 6
    assert len(rows_of(df)) == 12 == len(set(rows_of(df)))


def test_max_records_per_partition_splits_the_work(spark: Any, bootstrap: str, topic3: str) -> None:
    every = rows_of(read(spark, bootstrap, subscribe=topic3))
    assert len(every) == 12 == len(set(every))
    # 4 records a partition, at most 3 a task: 2 tasks each, on either read path.
    df = read(spark, bootstrap, subscribe=topic3, maxRecordsPerPartition="3")
    assert df.rdd.getNumPartitions() == 6
    assert rows_of(df) == every
    # With minPartitions too, as Spark: the six parts of 2 records split again.
    df = read(
        spark, bootstrap, subscribe=topic3, maxRecordsPerPartition="3", minPartitions="9",
        fetchPath="client",
    )  # fmt: skip
    assert df.rdd.getNumPartitions() == 12
    assert rows_of(df) == every


def test_new_partitions_are_read(spark: Any, bootstrap: str, topic3: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(topic3, 4)])[topic3].result(30)
    produce(bootstrap, topic3, [(3, b"new", b"new")])
    df = read(spark, bootstrap, subscribe=topic3)
    assert (topic3, 3, 0, b"new", b"new") in [
        (t, p, o, bytes(k), bytes(v))
        for t, p, o, k, v in rows_of(df)
        if k is not None and v is not None
    ]


def test_a_topic_that_does_not_exist_reads_as_empty(
    spark: Any, bootstrap: str, topic_name: str
) -> None:
    assert read(spark, bootstrap, subscribe=topic_name).count() == 0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "a", "assign": '{"a":[0]}'}, "Only one of the following options"),
        ({"subscribe": "a", "subscribePattern": "a.*"}, "subscribePattern"),
        ({}, "One of the following options must be specified"),
        ({"subscribe": "a", "kafka.group.id": "g"}, r"kafka\.group\.id"),
        ({"subscribe": "a", "kafka.auto.offset.reset": "earliest"}, "startingOffsets"),
        ({"subscribe": "a", "startingOffsets": "{not json"}, "startingOffsets"),
        ({"subscribe": "a", "minPartitions": "0"}, "minPartitions"),
        ({"subscribe": "a", "failOnDataLoss": "maybe"}, "failondataloss"),
        ({"subscribe": "a", "startingOffsetz": "earliest"}, "startingoffsetz"),
        ({"assign": "[0, 1]"}, "assign"),
        ({"subscribePattern": "("}, "subscribePattern"),
        ({"subscribe": "a", "endingOffsets": '{"a":{"0":-2}}'}, "endingOffsets"),
        ({"subscribe": "a", "endingOffsets": "earliest"}, "endingOffsets"),
    ],
)
def test_bad_options_fail_at_load_naming_the_option(
    spark: Any, bootstrap: str, options: dict[str, str], message: str
) -> None:
    with pytest.raises(Exception, match=message):
        read(spark, bootstrap, **options)  # load(), before any action


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "a", "startingOffsets": "latest"}, "startingOffsets"),
        ({"subscribe": "a", "startingOffsets": '{"a":{"0":-1}}'}, "startingOffsets"),
        ({"subscribe": "a", "maxOffsetsPerTrigger": "10"}, "maxOffsetsPerTrigger"),
    ],
)
def test_options_wrong_for_a_batch_read_fail_when_it_runs(
    spark: Any, bootstrap: str, options: dict[str, str], message: str
) -> None:
    df = read(spark, bootstrap, **options)  # right for a stream, so load() takes them
    with pytest.raises(Exception, match=message):
        df.count()


def test_missing_bootstrap_servers_is_named(spark: Any) -> None:
    with pytest.raises(Exception, match=r"kafka\.bootstrap\.servers"):
        spark.read.format("moldau").option("subscribe", "a").load().count()


def test_explicit_registration_works_too(spark: Any, bootstrap: str, topic3: str) -> None:
    import moldau.spark

    moldau.spark.register(spark)
    assert read(spark, bootstrap, subscribe=topic3).count() == 12
