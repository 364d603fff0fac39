"""The follower's ListOffsets on the wire (NetworkFetchClient.list_offset), to a broker
in this process leading the partition: its log end and start as the leader's
handler answers a replica, and its errors raised as their KafkaErrors."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from moldau.protocol.errors import UnknownLeaderEpochError
from moldau.protocol.records import build_batch
from moldau.replication.partition import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from moldau.server.control_client import NetworkTransport
from moldau.server.replica_fetch_client import NetworkFetchClient
from moldau.storage.partition_name import TopicPartition
from tests.integration.clients import create_topic
from tests.integration.in_process import running_broker

pytestmark = pytest.mark.integration


def test_a_follower_lists_the_leaders_log_end_and_start(tmp_path: Path, topic_name: str) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as broker:
            tp = TopicPartition(topic_name, 0)
            led = asyncio.Event()

            def leadership(changed: TopicPartition, is_leader: bool) -> None:
                if changed == tp and is_leader:
                    led.set()

            broker.replica_manager.on_leadership_change.append(leadership)
            await asyncio.to_thread(create_topic, f"127.0.0.1:{broker.port}", topic_name)
            async with asyncio.timeout(30):
                await led.wait()
            partition = broker.replica_manager.leader_partition_or_error(tp)
            for _ in range(3):
                partition.append_records_to_leader(
                    memoryview(build_batch([(None, b"a"), (None, b"b")])), 1
                )
            assert partition.log is not None
            partition.log.maybe_increment_log_start_offset(2)
            client = NetworkFetchClient(
                lambda: NetworkTransport(2, lambda _: ("127.0.0.1", broker.port))
            )
            try:

                async def ask(epoch: int, timestamp: int) -> int:
                    return await client.list_offset(1, 0, 2, tp, epoch, timestamp)

                assert await ask(partition.leader_epoch, LATEST_TIMESTAMP) == 6
                assert await ask(partition.leader_epoch, EARLIEST_TIMESTAMP) == 2
                with pytest.raises(UnknownLeaderEpochError):
                    await ask(partition.leader_epoch + 1, LATEST_TIMESTAMP)
            finally:
                await client.close()

    asyncio.run(main())
