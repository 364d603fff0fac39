"""Clients of the ZooKeeper era (issue 11), with the request versions Kafka 4.0
dropped: kafka-python pinned to the protocol of Kafka 0.8.2 commits offsets with
OffsetCommit v1 and reads them with OffsetFetch v1, pinned to 0.8.1 with v0 of both;
its admin client pinned to 0.10.1-0.11 creates topics with CreateTopics v0-v1,
deletes them with DeleteTopics v0 and describes them with DescribeConfigs v0; its
consumer pinned to 0.10.0 lists offsets with ListOffsets v0. OffsetForLeaderEpoch
v0-v1, which only brokers of Kafka 0.11-2.0 sent, are sent raw. The broker runs in
this process, so the tests see which versions were served."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CTP
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic
from kafka.structs import OffsetAndMetadata

from moldau.protocol.errors import ErrorCode
from moldau.protocol.legacy_schemas import (
    ListOffsetsPartitionV0,
    ListOffsetsRequestV0,
    ListOffsetsTopicV0,
    OffsetForLeaderEpochRequestV0,
    OffsetForLeaderPartitionV0,
    OffsetForLeaderTopicV0,
)
from moldau.server.broker import Broker
from tests.integration.clients import create_topic
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
