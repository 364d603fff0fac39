"""format("moldau") against Apache Kafka's own brokers, not Moldau's: the fetching read
path and the batch write path speak Kafka 4.1.1's protocol (its Fetch, ListOffsets,
Metadata, InitProducerId and Produce versions), and records in message formats v0
and v1, which only a Kafka 3.9 broker still writes (Moldau turns them into v2 on the
way in), go to the client path, said once in the log.

One Kafka 4.1.1 node (KRaft) and one Kafka 3.9 broker (on the session's ZooKeeper)
serve the whole module, started side by side."""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer

from moldau.protocol.records import HEADER_SIZE, BatchHeader
from moldau.spark.fetch_client import PartitionClient, parse_bootstrap
from moldau.testing.apache_kafka import KafkaBroker
from moldau.testing.zookeeper import ZooKeeperServer
from tests.integration.clients import create_topic
from tests.spark.test_read import read
from tests.spark.test_spark_connector import batch_read, rows
from tests.spark.test_stream import Batches, every, run_available_now, stream
from tests.spark.test_write import consume_stamped

pytestmark = [pytest.mark.spark, pytest.mark.java]

#: The consumer offsets' and transactions' topics of one partition, not 50: made on
#: first use, they are then ready in a moment.
SMALL = {"offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "1"}
#: Records written in message format v0 and v1 need inter.broker.protocol.version
#: below 3.0 (from 3.0 on a topic's message.format.version is ignored).
OLD_FORMATS = {"inter.broker.protocol.version": "2.8", **SMALL}


@pytest.fixture(scope="module")
def brokers(
    tmp_path_factory: pytest.TempPathFactory,
    zookeeper: ZooKeeperServer,
) -> Iterator[tuple[KafkaBroker, KafkaBroker]]:
    """Kafka 4.1.1 and Kafka 3.9, started at once (each JVM takes seconds)."""
    base = tmp_path_factory.mktemp("apache-kafka")
    kafka4 = KafkaBroker.kraft(base / "kafka-4", SMALL)
    chroot = f"/kafka39-{uuid.uuid4().hex[:8]}"
    kafka39 = KafkaBroker.on_zookeeper(base / "kafka-3.9", zookeeper.connect + chroot, OLD_FORMATS)
    try:
        for b in (kafka4, kafka39):
            b.launch()
        for b in (kafka4, kafka39):
            b.wait_ready()
        yield kafka4, kafka39
    finally:
        for b in (kafka4, kafka39):
            b.close()


@pytest.fixture
def kafka(brokers: tuple[KafkaBroker, KafkaBroker]) -> str:
    """Kafka 4.1.1's bootstrap servers."""
    return brokers[0].bootstrap


@pytest.fixture
def kafka39(brokers: tuple[KafkaBroker, KafkaBroker]) -> str:
    """Kafka 3.9's bootstrap servers."""
    return brokers[1].bootstrap


@pytest.fixture
def worker_logs(spark: Any) -> Iterator[Any]:
    """Python workers' log records of a switch to the client path that contain a
    text (Spark keeps the workers' log records while this is on)."""
    spark.conf.set("spark.sql.pyspark.worker.logging.enabled", "true")
    try:
        yield lambda text: [
            r.asDict(recursive=True)
            for r in spark.tvf.python_worker_logs().collect()
            if text in r.msg and "client path" in r.msg
        ]
    finally:
        spark.conf.unset("spark.sql.pyspark.worker.logging.enabled")


def produce(bootstrap: str, topic: str, n: int, partitions: int, **conf: Any) -> None:
    """n records round the partitions, some with null keys or values, every third
    with headers (but in message formats v0 and v1, which have none: `headers=False`)."""
    headers = conf.pop("headers", True)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    failed: list[Any] = []
    for i in range(n):
        p.produce(
            topic,
            None if i % 7 == 0 else b"v%d" % i * (i % 50),
            None if i % 5 == 0 else b"k%d" % i,
            partition=i % partitions,
            headers=[("h", b"%d" % i), ("n", None)] if headers and i % 3 == 0 else None,
            on_delivery=lambda err, _: err is None or failed.append(err),
        )
    assert p.flush(30) == 0
    assert not failed, failed[0]


def every_column(df: Any) -> list[tuple[Any, ...]]:
    return sorted((tuple(r) for r in df.collect()), key=lambda r: (r[3], r[4]))


def test_the_fetching_path_reads_kafka_as_the_client_path_does(
    spark: Any, kafka: str, topic_name: str, worker_logs: Any
) -> None:
    """Every codec, headers, nulls, three partitions, an offset range within them."""
    create_topic(kafka, topic_name, partitions=3)
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        produce(kafka, topic_name, 300, 3, **{"compression.type": codec})
    bounds = {
        "subscribe": topic_name,
        "includeHeaders": "true",
        "startingOffsets": json.dumps({topic_name: {"0": 2, "1": -2, "2": -2}}),
        "endingOffsets": json.dumps({topic_name: {"0": 480, "1": -1, "2": -1}}),
    }
    fetched = every_column(read(spark, kafka, **bounds))
    assert fetched == every_column(read(spark, kafka, fetchPath="client", **bounds))
    assert len(fetched) == 1500 - 2 - 20
    assert {r[6] for r in fetched} == {0}  # CreateTime
    assert worker_logs(topic_name) == []


def test_read_committed_leaves_out_aborted_transactions_and_markers(
    spark: Any, kafka: str, topic_name: str
) -> None:
    create_topic(kafka, topic_name, partitions=2)
    p = Producer({"bootstrap.servers": kafka, "transactional.id": topic_name})
    p.init_transactions(30)
    for t in range(4):
        p.begin_transaction()
        for i in range(10):
            p.produce(topic_name, b"%d-%d" % (t, i), partition=i % 2)
        if t % 2:
            p.flush(30)  # written, then aborted
            p.abort_transaction(30)
        else:
            p.commit_transaction(30)
    committed = read(
        spark, kafka, subscribe=topic_name, **{"kafka.isolation.level": "read_committed"}
    )
    got = sorted((r.partition, r.offset, r.value) for r in committed.collect())
    assert sorted(v for *_, v in got) == sorted(
        b"%d-%d" % (t, i) for t in (0, 2) for i in range(10)
    )
    # Each transaction's 5 records a partition and its marker: the second committed
    # one's records follow an aborted one's and two markers.
    assert [r[:2] for r in got] == [(p, o) for p in (0, 1) for o in [*range(5), *range(12, 17)]]
    uncommitted = read(spark, kafka, subscribe=topic_name)
    assert uncommitted.count() == 40


def test_a_stream_reads_kafka_in_bounded_micro_batches(
    spark: Any, kafka: str, topic_name: str, checkpoint: str
) -> None:
    create_topic(kafka, topic_name, partitions=2)
    produce(kafka, topic_name, 50, 2)
    sink = Batches()
    df = stream(
        spark,
        kafka,
        subscribe=topic_name,
        startingOffsets="earliest",
        maxOffsetsPerTrigger="20",
    )
    run_available_now(df, checkpoint, sink)
    assert [len(rows) for _, rows in sorted(sink.by_id.items())] == [20, 20, 10]
    assert sink.rows() == every(topic_name, 2, 25)


def test_the_batch_path_writes_to_kafka_what_the_client_path_writes(
    spark: Any, kafka: str, topic_name: str, worker_logs: Any
) -> None:
    """Read back alike, and as an idempotent producer's: each record batch has a
    producer id and sequences that follow on from the partition's last."""
    n = 2000
    rows = [
        (None if i % 7 == 0 else f"key-{i}", b"value-%d" % i, i % 3 if i % 4 == 0 else None)
        for i in range(n)
    ]
    df = spark.createDataFrame(rows, "key string, value binary, partition int").repartition(2)
    written = {
        path: write(df, kafka, f"{topic_name}-{path}", path, n) for path in ("client", "batch")
    }
    # Each row's value is its own. Rows with a key or a partition land where the
    # client path puts them; keyless ones anywhere.
    pinned = {v for k, v, p in rows if k is not None or p is not None}

    def placed(got: list[Any]) -> dict[bytes, tuple[int, bytes | None]]:
        return {value: (part, key) for part, key, value, *_ in got if value in pinned}

    assert placed(written["batch"]) == placed(written["client"])
    assert len(placed(written["batch"])) == len(pinned)
    keys = {path: {value: key for _, key, value, *_ in got} for path, got in written.items()}
    assert keys["batch"] == keys["client"]
    assert len(keys["batch"]) == n
    # The batch path did not fall back (a worker says so once a reason).
    assert worker_logs("writing through") == []
    for partition in range(3):
        headers = batch_headers(kafka, f"{topic_name}-batch", partition)
        assert headers and all(h.producer_id >= 0 for h in headers)
        for before, after in itertools.pairwise(headers):
            if after.producer_id == before.producer_id:
                assert after.base_sequence == before.base_sequence + before.last_offset_delta + 1


def write(df: Any, bootstrap: str, topic: str, path: str, n: int) -> list[Any]:
    """df written to a new topic of 3 partitions on `path`; the n records read back."""
    create_topic(bootstrap, topic, partitions=3)
    save = df.write.format("moldau").option("kafka.bootstrap.servers", bootstrap)
    save.option("topic", topic).option("writePath", path).mode("append").save()
    return consume_stamped(bootstrap, topic, 3, n)


def batch_headers(bootstrap: str, topic: str, partition: int) -> list[BatchHeader]:
    """The headers of the record batches of a partition, as a consumer fetches them."""
    client = PartitionClient(parse_bootstrap(bootstrap), topic, partition, read_committed=False)
    headers: list[BatchHeader] = []
    try:
        offset = 0
        while True:
            records = memoryview(client.fetch(offset, 1 << 20).records)
            if not records:
                return headers
            pos = 0
            while pos + HEADER_SIZE <= len(records):
                h = BatchHeader.parse(records, pos)
                if pos + h.size > len(records):
                    break  # cut short by the fetch's size: the next fetch has it
                headers.append(h)
                pos += h.size
                offset = h.last_offset + 1
    finally:
        client.close()


def test_old_format_records_from_kafka_3_9_go_to_the_client_path_said_once(
    spark: Any, kafka39: str, topic_name: str, worker_logs: Any
) -> None:
    """Topics in message format v0 (no timestamps) and v1, compressed and not, and a
    v2 topic on the same broker: read as the client path and Spark's own Kafka
    connector read them. Each old-format
    partition, read by four tasks, is said in the log to go to the client path once
    per Python worker (local[2] has two); the v2 one is not."""
    formats = {"v0": "0.9.0", "v1": "0.10.2", "v2": "2.8"}
    for name, version in formats.items():
        topic = f"{topic_name}-{name}"
        create_topic(kafka39, topic, partitions=2, **{"message.format.version": version})
        for codec in ("none", "gzip", "lz4"):
            produce(kafka39, topic, 60, 2, headers=False, **{"compression.type": codec})
    options = {"subscribePattern": f"{topic_name}-.*", "startingOffsets": "earliest"}
    fetched = batch_read(spark, "moldau", kafka39, minPartitions="24", **options)
    assert fetched.rdd.getNumPartitions() == 24
    got = rows(fetched)
    assert got == rows(batch_read(spark, "moldau", kafka39, fetchPath="client", **options))
    assert got == rows(batch_read(spark, "kafka", kafka39, **options))  # Spark's own connector
    assert len(got) == 3 * 180
    # Kafka's NO_TIMESTAMP_TYPE (-1) for v0, CreateTime (0) for the others.
    assert {(r[2].rsplit("-", 1)[1], r[6]) for r in got} == {("v0", -1), ("v1", 0), ("v2", 0)}
    said = [m["msg"] for m in worker_logs(topic_name)]
    for name in ("v0", "v1"):
        for partition in range(2):
            tp = f"{topic_name}-{name}-{partition}"
            these = [m for m in said if m.startswith(f"reading {tp} ")]
            assert 1 <= len(these) <= 2, said
            assert all(
                m.startswith(f"reading {tp} through confluent-kafka (the client path) from offset ")
                and m.endswith(f": the fetching path does not read message format {name}")
                for m in these
            ), these
    assert not [m for m in said if f"{topic_name}-v2" in m], said
