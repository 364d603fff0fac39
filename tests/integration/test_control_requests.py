"""LeaderAndIsr, StopReplica and UpdateMetadata over a real socket to a broker (an
embedded one in this process, so the test knows its registration epoch and its
controller's): a request meant for the broker's previous registration is refused
with STALE_BROKER_EPOCH, one of an older controller epoch with
STALE_CONTROLLER_EPOCH, and neither changes anything."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from moldau.protocol.control import (
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    StopReplicaPartitionState,
    StopReplicaRequest,
    UpdateMetadataBroker,
    UpdateMetadataEndpoint,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
)
from moldau.protocol.errors import ErrorCode
from moldau.server.control_client import NetworkTransport
from moldau.storage.partition_name import TopicPartition
from tests.integration.clients import confluent_produce, create_topic
from tests.integration.in_process import single_broker

pytestmark = pytest.mark.integration


def test_requests_for_a_previous_registration_or_controller_change_nothing(
    tmp_path: Path, topic_name: str
) -> None:
    async def main() -> None:
        cluster = single_broker(tmp_path)
        await cluster.start()
        broker = cluster.brokers[0]
        bootstrap = f"127.0.0.1:{broker.port}"
        link = NetworkTransport(0, lambda _: ("127.0.0.1", broker.port))
        try:
            await asyncio.to_thread(create_topic, bootstrap, topic_name)
            tp = TopicPartition(topic_name, 0)
            ctx = broker.controller.ctx
            controller_epoch, topic_ids = ctx.epoch, dict(ctx.topic_ids)
            li = ctx.leadership[tp].leader_and_isr
            old = broker.epoch - 1  # the previous registration's
            # A follower of broker 2 in a newer leader epoch; the log deleted; the
            # topic gone from the metadata: each would stop the partition here.
            follow = LeaderAndIsrPartitionState(
                topic_name, 0, controller_epoch, 2, li.leader_epoch + 1, (2,), li.partition_epoch,
                (1, 2),
            )  # fmt: skip
            endpoint = UpdateMetadataEndpoint(broker.port, "127.0.0.1", "PLAINTEXT")
            me = UpdateMetadataBroker(1, (endpoint,))
            gone = UpdateMetadataPartitionState(
                topic_name, 0, controller_epoch, -2, li.leader_epoch + 1, (1,), 0, (1,)
            )
            requests = [
                LeaderAndIsrRequest(1, controller_epoch, old, (follow,), topic_ids, ()),
                StopReplicaRequest(
                    1, controller_epoch, old, (StopReplicaPartitionState(topic_name, 0, -2, True),)
                ),
                UpdateMetadataRequest(1, controller_epoch, old, (gone,), (me,), topic_ids),
            ]
            for request in requests:
                response = await link.send(1, request)
                assert response.error_code == ErrorCode.stale_broker_epoch, request
            stale_controller = UpdateMetadataRequest(
                1, controller_epoch - 1, broker.epoch, (gone,), (me,), topic_ids
            )
            response = await link.send(1, stale_controller)
            assert response.error_code == ErrorCode.stale_controller_epoch

            # The broker still leads the partition, with its log, and serves it.
            assert broker.metadata_cache.contains_topic(topic_name)
            assert broker.replica_manager.leader_partition_or_error(tp).leader_epoch == (
                li.leader_epoch
            )
            records = [(None, b"v", [])]
            offsets = await asyncio.to_thread(confluent_produce, bootstrap, topic_name, records)
            assert offsets == [0]
        finally:
            await link.close()
            await cluster.shutdown()

    asyncio.run(main())
