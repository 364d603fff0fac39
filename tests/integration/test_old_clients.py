"""Clients of the ZooKeeper era (issue 11): kafka-python pinned to the protocol of
Kafka 0.8.2 commits offsets with OffsetCommit v1 and reads them with OffsetFetch v1,
pinned to 0.8.1 with v0 of both (versions Kafka 4.0 dropped). The offsets land where
any group's do: a modern client reads them back. The broker runs in this process,
so the test sees which versions were served."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CTP
from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

from tests.integration.clients import create_topic
from tests.integration.in_process import running_broker

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
            served = broker.request_metrics.requests
            assert served.get(("OffsetCommit", version), 0) >= 1, served
            assert served.get(("OffsetFetch", version), 0) >= 1, served

    asyncio.run(main())
