"""Clients of the ZooKeeper era (issue 11), with the request versions Kafka 4.0
dropped. librdkafka told the broker is Kafka 0.9.0 produces, consumes in a group and
commits with their first versions. kafka-python pinned to the protocols of Kafka
0.8.2-0.10.1 produces and consumes in the message formats of magic 0 and 1 (Produce
v0-v2, Fetch v0-v3, every codec those formats have), which modern clients read as
record batches, and the other way round; pinned to 0.8.2 it commits offsets with
OffsetCommit v1 and reads them with OffsetFetch v1, pinned to 0.8.1 with v0 of both;
its admin client pinned to 0.10.1-0.11 creates topics with CreateTopics v0-v1,
deletes them with DeleteTopics v0 and describes them with DescribeConfigs v0; its
consumer pinned to 0.10.0 lists offsets with ListOffsets v0. OffsetForLeaderEpoch
v0-v1, which only brokers of Kafka 0.11-2.0 sent, are sent raw. The broker runs in
this process, so the tests see which versions were served."""

from __future__ import annotations

import asyncio
import struct
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTP
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic
from kafka.structs import OffsetAndMetadata

from moldau.protocol.errors import ErrorCode
from moldau.protocol.legacy_records import MAGIC_V1, entry, message
from moldau.protocol.legacy_schemas import (
    ListOffsetsPartitionV0,
    ListOffsetsRequestV0,
    ListOffsetsTopicV0,
    OffsetForLeaderEpochRequestV0,
    OffsetForLeaderPartitionV0,
    OffsetForLeaderTopicV0,
)
from moldau.protocol.records import Compression, build_batch
from moldau.protocol.wire import Reader
from moldau.server.broker import Broker
from tests.integration import requests as rq
from tests.integration.clients import confluent_consume, confluent_produce, create_topic
from tests.integration.in_process import running_broker
from tests.integration.kafka_wire import WireClient

pytestmark = pytest.mark.integration


def commit_and_read_back(bootstrap: str, topic: str, group: str, era: tuple[int, ...]) -> object:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        api_version=era,
        enable_auto_commit=False,
        request_timeout_ms=10_000,
    )
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.commit({tp: OffsetAndMetadata(42, "from " + ".".join(map(str, era)), -1)})
        return consumer.committed(tp)
    finally:
        consumer.close()


def committed_seen_by_librdkafka(bootstrap: str, topic: str, group: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        [tp] = consumer.committed([CTP(topic, 0)], timeout=20)
        return int(tp.offset)
    finally:
        consumer.close()


@pytest.mark.parametrize(("era", "version"), [((0, 8, 2), 1), ((0, 8, 1), 0)])
def test_offsets_committed_with_the_protocol_of_kafka_0_8(
    tmp_path: Path, topic_name: str, era: tuple[int, ...], version: int
) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as broker:
            bootstrap = f"127.0.0.1:{broker.port}"
            group = f"g-{topic_name}"
            await asyncio.to_thread(create_topic, bootstrap, topic_name)
            got = await asyncio.to_thread(commit_and_read_back, bootstrap, topic_name, group, era)
            assert got == 42
            seen = await asyncio.to_thread(
                committed_seen_by_librdkafka, bootstrap, topic_name, group
            )
            assert seen == 42
            assert served(broker, "OffsetCommit", version)
            assert served(broker, "OffsetFetch", version)

    asyncio.run(main())


def admin_of(bootstrap: str, era: tuple[int, ...]) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap, api_version=era, request_timeout_ms=10_000)


def manage_topics(bootstrap: str, topic: str) -> dict[str, object]:
    seen: dict[str, object] = {}
    old = admin_of(bootstrap, (0, 10, 1))  # CreateTopics v0, DeleteTopics v0
    newer = admin_of(bootstrap, (0, 10, 2))  # CreateTopics v1
    eleven = admin_of(bootstrap, (0, 11))  # DescribeConfigs v0
    try:
        old.create_topics([NewTopic(topic, 2, 1, topic_configs={"retention.ms": "3600000"})])
        again = newer.create_topics([NewTopic(topic, 2, 1)], raise_errors=False)
        seen["again"] = [(t["error_code"], t["error_message"]) for t in again["topics"]]
        resource = ConfigResource(ConfigResourceType.TOPIC, topic)
        described = eleven.describe_configs([resource], config_filter="all")["topic"][topic]
        seen["retention.ms"] = described["retention.ms"]
        seen["cleanup.policy"] = described["cleanup.policy"]
        deleted = old.delete_topics([topic])
        seen["deleted"] = [(t["name"], t["error_code"]) for t in deleted["topics"]]
        seen["topics after"] = topic in newer.list_topics()
    finally:
        for admin in (old, newer, eleven):
            admin.close()
    return seen


def test_topics_managed_with_the_protocol_of_kafka_0_10_and_0_11(
    tmp_path: Path, topic_name: str
) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as broker:
            bootstrap = f"127.0.0.1:{broker.port}"
            seen = await asyncio.to_thread(manage_topics, bootstrap, topic_name)
            assert seen["again"] == [
                (ErrorCode.topic_already_exists, f"Topic '{topic_name}' already exists.")
            ]
            retention, cleanup = seen["retention.ms"], seen["cleanup.policy"]
            assert retention["value"] == "3600000"  # type: ignore[index]
            assert retention["is_default"] is False  # type: ignore[index]
            assert cleanup["value"] == "delete"  # type: ignore[index]
            assert cleanup["is_default"] is True  # type: ignore[index]
            assert seen["deleted"] == [(topic_name, 0)]
            assert seen["topics after"] is False
            for api, version in (("CreateTopics", 0), ("CreateTopics", 1),
                                 ("DeleteTopics", 0), ("DescribeConfigs", 0)):  # fmt: skip
                assert served(broker, api, version), (api, version)

    asyncio.run(main())


def produce_one_batch_each(bootstrap: str, topic: str, n: int) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    try:
        for i in range(n):
            producer.send(topic, b"v" * 200 + bytes([i]), partition=0).get(timeout=10)
    finally:
        producer.close()


def list_offsets_v0(bootstrap: str, topic: str, *asks: tuple[int, int]) -> list[object]:
    """(timestamp, max_num_offsets) -> the offsets (or error) answered for each."""
    with WireClient(bootstrap) as c:
        out: list[object] = []
        for timestamp, max_num in asks:
            partition = ListOffsetsPartitionV0(
                partition_index=0, timestamp=timestamp, max_num_offsets=max_num
            )
            request = ListOffsetsRequestV0(
                replica_id=-1, topics=(ListOffsetsTopicV0(name=topic, partitions=(partition,)),)
            )
            [topic_response] = c.request(request).topics
            [p] = topic_response.partitions
            out.append(list(p.old_style_offsets) if p.error_code == 0 else p.error_code)
        return out


def end_and_beginning_offsets(bootstrap: str, topic: str) -> tuple[int, int]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, api_version=(0, 10, 0))
    try:
        tp = TopicPartition(topic, 0)
        return consumer.beginning_offsets([tp])[tp], consumer.end_offsets([tp])[tp]
    finally:
        consumer.close()


def test_list_offsets_v0_lists_segment_starts(tmp_path: Path, topic_name: str) -> None:
    """Kafka 0.8's offsets "before" a time: each segment's first offset, and the log
    end offset, latest first. Segments of 300 bytes hold one 271-byte batch each."""

    async def main() -> None:
        async with running_broker(tmp_path) as broker:
            bootstrap = f"127.0.0.1:{broker.port}"
            await asyncio.to_thread(create_topic, bootstrap, topic_name, **{"segment.bytes": "300"})
            await asyncio.to_thread(produce_one_batch_each, bootstrap, topic_name, 4)
            got = await asyncio.to_thread(
                list_offsets_v0, bootstrap, topic_name,
                (-1, 10), (-1, 2), (-2, 10), (0, 10), (2**62, 3),
            )  # fmt: skip
            assert got == [[4, 3, 2, 1, 0], [4, 3], [0], [], [4, 3, 2]]
            assert await asyncio.to_thread(end_and_beginning_offsets, bootstrap, topic_name) == (
                0,
                4,
            )
            assert served(broker, "ListOffsets", 0)
            [missing] = await asyncio.to_thread(list_offsets_v0, bootstrap, "no-such", (-1, 1))
            assert missing == ErrorCode.unknown_topic_or_partition

    asyncio.run(main())


def offset_for_leader_epoch(bootstrap: str, topic: str, version: int) -> list[tuple[int, ...]]:
    request = OffsetForLeaderEpochRequestV0(
        topics=(
            OffsetForLeaderTopicV0(
                topic=topic,
                partitions=(
                    OffsetForLeaderPartitionV0(partition=0, leader_epoch=0),
                    OffsetForLeaderPartitionV0(partition=9, leader_epoch=0),
                ),
            ),
        )
    )
    with WireClient(bootstrap) as c:
        [t] = c.request(request, version).topics
        return [
            (p.partition, p.error_code, getattr(p, "leader_epoch", None), p.end_offset)
            for p in t.partitions
        ]


@pytest.mark.parametrize("version", [0, 1])
def test_offset_for_leader_epoch_v0_v1(tmp_path: Path, topic_name: str, version: int) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as broker:
            bootstrap = f"127.0.0.1:{broker.port}"
            await asyncio.to_thread(create_topic, bootstrap, topic_name)
            await asyncio.to_thread(produce_one_batch_each, bootstrap, topic_name, 3)
            got = await asyncio.to_thread(offset_for_leader_epoch, bootstrap, topic_name, version)
            epoch = 0 if version == 1 else None  # v0 does not say which epoch
            assert got == [
                (0, ErrorCode.none, epoch, 3),
                (9, ErrorCode.unknown_topic_or_partition, -1 if version else None, -1),
            ]
            assert served(broker, "OffsetForLeaderEpoch", version)

    asyncio.run(main())


def served(broker: Broker, api: str, version: int) -> bool:
    return broker.request_metrics.requests.get((api, version), 0) >= 1


def produce_and_consume_in_era(
    bootstrap: str, topic: str, era: tuple[int, ...], codec: str | None
) -> list[tuple[int, bytes | None, bytes | None, int | None]]:
    producer = KafkaProducer(
        bootstrap_servers=bootstrap, api_version=era, compression_type=codec, linger_ms=5
    )
    try:
        for i in range(20):
            producer.send(topic, key=b"k%d" % i, value=b"old %d" % i, partition=0)
        producer.flush(30)
    finally:
        producer.close()
    modern = [(b"new", b"modern %d" % i, [("h", b"dropped for old clients")]) for i in range(3)]
    confluent_produce(bootstrap, topic, modern, compression=codec or "none")
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, api_version=era, consumer_timeout_ms=20_000
    )
    got = []
    try:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        for m in consumer:
            got.append((m.offset, m.key, m.value, m.timestamp))
            if len(got) == 23:
                break
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize(
    ("era", "codec", "produce_version", "fetch_version"),
    [
        ((0, 8, 2), "lz4", 0, 0),  # magic 0, with Kafka 0.8's LZ4 header checksum
        ((0, 9), "snappy", 1, 1),
        ((0, 10, 0), "gzip", 2, 2),  # magic 1: timestamps
        ((0, 10, 1), None, 2, 3),
    ],
)
def test_old_message_formats_in_and_out(
    tmp_path: Path,
    topic_name: str,
    era: tuple[int, ...],
    codec: str | None,
    produce_version: int,
    fetch_version: int,
) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as broker:
            bootstrap = f"127.0.0.1:{broker.port}"
            await asyncio.to_thread(create_topic, bootstrap, topic_name)
            got = await asyncio.to_thread(
                produce_and_consume_in_era, bootstrap, topic_name, era, codec
            )
            assert [(o, k, v) for o, k, v, _ in got] == [
                *((i, b"k%d" % i, b"old %d" % i) for i in range(20)),
                *((20 + i, b"new", b"modern %d" % i) for i in range(3)),
            ]
            stamps = {ts for *_, ts in got}
            if fetch_version < 2:
                assert stamps == {None}  # magic 0 has none
            else:
                assert all(ts is not None and ts > 1_700_000_000_000 for ts in stamps)
            modern = await asyncio.to_thread(confluent_consume, bootstrap, topic_name, 23)
            assert [(o, k, v) for _, o, k, v, _ in modern[:20]] == [
                (i, b"k%d" % i, b"old %d" % i) for i in range(20)
            ]
            assert modern[20][4] == [("h", b"dropped for old clients")]
            assert served(broker, "Produce", produce_version)
            assert served(broker, "Fetch", fetch_version)

    asyncio.run(main())


def produce_raw(bootstrap: str, topic: str, version: int, records: bytes) -> tuple[int, int]:
    """One partition's records in a Produce request of `version` (0-6) with acks=1:
    (error code, base offset) answered."""
    w = bytearray() if version < 3 else bytearray(struct.pack(">h", -1))  # no txn id
    name = topic.encode()
    w += struct.pack(">hii", 1, 10_000, 1) + struct.pack(">h", len(name)) + name
    w += struct.pack(">iii", 1, 0, len(records)) + records
    with WireClient(bootstrap) as c:
        c.send_raw(c.frame(0, version, bytes(w)))
        r = Reader(memoryview(c.read_frame()), 4)
    assert r.int32() == 1 and r.string(False) == topic and r.int32() == 1
    assert r.int32() == 0  # partition
    return r.int16(), r.int64()


def fetch_raw(bootstrap: str, topic: str, version: int, max_bytes: int) -> tuple[int, bytes]:
    """Partition 0 from offset 0 in a Fetch of `version` (0-3): (error code, records)."""
    name = topic.encode()
    w = struct.pack(">iii", -1, 100, 1) + (struct.pack(">i", max_bytes) if version == 3 else b"")
    w += struct.pack(">ih", 1, len(name)) + name + struct.pack(">iiqi", 1, 0, 0, max_bytes)
    with WireClient(bootstrap) as c:
        c.send_raw(c.frame(1, version, w))
        r = Reader(memoryview(c.read_frame()), 4)
    if version >= 1:
        r.int32()  # throttle time
    assert r.int32() == 1 and r.string(False) == topic and r.int32() == 1
    assert r.int32() == 0  # partition
    error = r.int16()
    r.int64()  # high watermark
    records = r.nullable_bytes(False)
    return error, bytes(records or b"")


def test_bad_old_produce_and_fetch_get_kafkas_answers(tmp_path: Path, topic_name: str) -> None:
    """A message failing its CRC is refused (CORRUPT_MESSAGE) and nothing is appended;
    zstd has no old message format (UNSUPPORTED_COMPRESSION_TYPE, also for Produce
    v3-v6, as from Kafka); Fetch v0-v2 keep to their byte limit even if the first
    message does not fit (the client learns its fetch size is too small), v3 sends
    that message whole; Fetch v4-v9 of a zstd batch get UNSUPPORTED_COMPRESSION_TYPE
    too (KIP-110), v10 the batch."""

    async def main() -> None:
        async with running_broker(tmp_path) as broker:
            bootstrap = f"127.0.0.1:{broker.port}"
            await asyncio.to_thread(create_topic, bootstrap, topic_name)
            now = int(time.time() * 1000)  # an old timestamp would roll the segment
            one = entry(0, message(MAGIC_V1, 0, now, b"key", b"v" * 100))
            corrupt = bytearray(one)
            corrupt[-1] ^= 0xFF

            def checks() -> None:
                assert produce_raw(bootstrap, topic_name, 2, bytes(corrupt)) == (
                    ErrorCode.corrupt_message,
                    -1,
                )
                assert produce_raw(bootstrap, topic_name, 2, one) == (ErrorCode.none, 0)
                zstd = build_batch([(None, b"z")], compression=Compression.ZSTD)
                for version in (3, 6):
                    error, _ = produce_raw(bootstrap, topic_name, version, zstd)
                    assert error == ErrorCode.unsupported_compression_type
                assert fetch_raw(bootstrap, topic_name, 2, 1 << 20) == (ErrorCode.none, one)
                for version in (0, 1):
                    error, cut = fetch_raw(bootstrap, topic_name, version, 70)
                    offset, size = struct.unpack_from(">qi", cut)
                    assert (error, len(cut), offset) == (ErrorCode.none, 70, 0)
                    assert size > 70 - 12  # a message that does not fit
                assert fetch_raw(bootstrap, topic_name, 3, 70) == (ErrorCode.none, one)

            await asyncio.to_thread(checks)
            await asyncio.to_thread(
                confluent_produce, bootstrap, topic_name, [(None, b"z" * 1000, [])], "zstd"
            )
            error, records = await asyncio.to_thread(fetch_raw, bootstrap, topic_name, 3, 1 << 20)
            assert (error, records) == (ErrorCode.unsupported_compression_type, b"")

            def fetch_zstd(version: int) -> tuple[int, int]:
                with WireClient(bootstrap) as c:
                    r = c.request(rq.fetch(topic_name, 0, 1, version))
                    [p] = r.responses[0].partitions
                    return p.error_code, len(p.records or b"")

            # KIP-110: below Fetch v10 a client is older than zstd; v10 reads it.
            for version in (4, 9):
                error, size = await asyncio.to_thread(fetch_zstd, version)
                assert (error, size) == (ErrorCode.unsupported_compression_type, 0)
            error, size = await asyncio.to_thread(fetch_zstd, 10)
            assert error == ErrorCode.none and size > 0

    asyncio.run(main())


OLD_LIBRDKAFKA = {"api.version.request": False, "broker.version.fallback": "0.9.0", "log_level": 3}


def librdkafka_of_kafka_0_9(bootstrap: str, topic: str, group: str) -> tuple[list[bytes], int]:
    """librdkafka told the broker is Kafka 0.9.0 (no ApiVersions): magic 0 messages,
    a group of the first group protocol, offsets committed in it."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **OLD_LIBRDKAFKA})
    for i in range(10):
        producer.produce(topic, b"from 0.9 %d" % i, partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         **OLD_LIBRDKAFKA})  # fmt: skip
    values: list[bytes] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(values) < 10 and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                values.append(m.value())
        consumer.commit(asynchronous=False)
        [committed] = consumer.committed([CTP(topic, 0)], timeout=20)
    finally:
        consumer.close()
    return values, int(committed.offset)


def test_librdkafka_speaking_kafka_0_9(tmp_path: Path, topic_name: str) -> None:
    async def main() -> None:
        # Its group forms at once rather than after 3 s.
        async with running_broker(tmp_path, {"group.initial.rebalance.delay.ms": "0"}) as broker:
            bootstrap = f"127.0.0.1:{broker.port}"
            await asyncio.to_thread(create_topic, bootstrap, topic_name)
            values, committed = await asyncio.to_thread(
                librdkafka_of_kafka_0_9, bootstrap, topic_name, f"g-{topic_name}"
            )
            assert values == [b"from 0.9 %d" % i for i in range(10)]
            assert committed == 10
            assert await asyncio.to_thread(committed_seen_by_librdkafka, bootstrap,
                                           topic_name, f"g-{topic_name}") == 10  # fmt: skip
            first_versions = [("Produce", 1), ("Fetch", 1), ("ListOffsets", 0),
                              ("JoinGroup", 0), ("SyncGroup", 0), ("OffsetCommit", 2)]  # fmt: skip
            for api, version in first_versions:
                assert served(broker, api, version), (api, version)

    asyncio.run(main())
