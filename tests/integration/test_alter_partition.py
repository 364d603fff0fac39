"""AlterPartition (56) v2 over a real socket to a broker whose controller is active
(an embedded broker in this process, so the test knows its registration epoch):
a proposal the controller can accept, and the ones it refuses with Kafka's codes."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from moldau.protocol import alter_partition as ap
from moldau.protocol.apis import ApiKey
from moldau.protocol.codec import encode_body
from moldau.protocol.control import AlterPartitionItem
from moldau.protocol.errors import ErrorCode
from moldau.server.control_client import NetworkTransport
from moldau.storage.partition_name import TopicPartition
from tests.integration.clients import create_topic
from tests.integration.in_process import single_broker

pytestmark = pytest.mark.integration


def test_alter_partition_on_the_wire(tmp_path: Path, topic_name: str) -> None:
    async def main() -> None:
        cluster = single_broker(tmp_path)
        await cluster.start()
        broker = cluster.brokers[0]
        link = NetworkTransport(0, lambda _: ("127.0.0.1", broker.port))
        try:
            await asyncio.to_thread(create_topic, f"127.0.0.1:{broker.port}", topic_name)
            tp = TopicPartition(topic_name, 0)
            state = broker.controller.ctx.leadership[tp].leader_and_isr
            topic_ids = dict(broker.controller.ctx.topic_ids)

            async def ask(
                isr: tuple[int, ...],
                epoch: int = broker.epoch,
                ids: dict[str, uuid.UUID] = topic_ids,
            ) -> tuple[ErrorCode, list[object]]:
                item = AlterPartitionItem(
                    topic_name, 0, state.leader_epoch, isr, state.partition_epoch
                )
                request = ap.build_request(1, epoch, [item], topic_ids)
                body = await link.request(
                    1, ApiKey.ALTER_PARTITION, ap.VERSION, encode_body(request)
                )
                response = ap.decode_response_body(body)
                names = {v: k for k, v in topic_ids.items()}
                return ap.response_results(response, names)  # type: ignore[return-value]

            error, [same] = await ask((1,))
            assert error == ErrorCode.none
            assert (same.error_code, same.leader_id, same.isr) == (ErrorCode.none, 1, (1,))  # type: ignore[attr-defined]
            error, [ineligible] = await ask((1, 2))
            assert ineligible.error_code == ErrorCode.ineligible_replica  # type: ignore[attr-defined]
            assert (await ask((1,), epoch=broker.epoch + 1))[0] == ErrorCode.stale_broker_epoch
            stray = {topic_name: uuid.uuid4()}
            request = ap.build_request(
                1, broker.epoch, [AlterPartitionItem(topic_name, 0, 0, (1,), 0)], stray
            )
            body = await link.request(1, ApiKey.ALTER_PARTITION, ap.VERSION, encode_body(request))
            response = ap.decode_response_body(body)
            [[unknown]] = [t.partitions for t in response.topics]
            assert unknown.error_code == ErrorCode.unknown_topic_id
        finally:
            await link.close()
            await cluster.shutdown()

    asyncio.run(main())
