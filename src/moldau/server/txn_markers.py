"""Transaction markers between brokers: how a transaction coordinator reaches the
leaders of a transaction's partitions (WriteTxnMarkers over the inter-broker
listener, or a direct call when it leads them itself), and what a leader does with
markers it is sent."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from moldau.coordinator.group_metadata_manager import CONSUMER_OFFSETS
from moldau.coordinator.transaction.marker_channel import TxnMarkerEntry
from moldau.protocol.apis import ApiKey
from moldau.protocol.codec import build_entity, decode_response, encode_body, request_class
from moldau.protocol.errors import ErrorCode
from moldau.replication.replica_manager import TxnMarkerAppend
from moldau.server.control_client import NetworkTransport
from moldau.storage.partition_name import TopicPartition, by_topic

if TYPE_CHECKING:
    from moldau.server.broker import Broker

# The version brokers send (flexible; v0 is the same without tagged fields).
WRITE_TXN_MARKERS_VERSION = 1


async def write_txn_markers(
    broker: Broker, markers: list[TxnMarkerEntry]
) -> list[dict[TopicPartition, ErrorCode]]:
    """Append each marker to the partitions this broker leads, answered once they
    are replicated (acks=all). Offsets committed in the transaction become their
    groups' (or are dropped) once the marker is in (Kafka's
    handleWriteTxnMarkersRequest)."""
    timeout_ms = broker.config["request.timeout.ms"]
    answers = []
    for marker in markers:
        entry = TxnMarkerAppend(
            marker.producer_id, marker.producer_epoch, marker.coordinator_epoch, marker.commit
        )
        future: asyncio.Future[dict[TopicPartition, ErrorCode]] = (
            asyncio.get_running_loop().create_future()
        )

        def respond(
            results: dict[TopicPartition, ErrorCode],
            future: asyncio.Future[dict[TopicPartition, ErrorCode]] = future,
        ) -> None:
            if not future.done():
                future.set_result(results)

        broker.replica_manager.append_end_txn_markers(
            timeout_ms, dict.fromkeys(marker.partitions, entry), respond
        )
        results = future.result() if future.done() else await future
        offsets_partitions = [
            tp.partition
            for tp, code in results.items()
            if tp.topic == CONSUMER_OFFSETS and code == ErrorCode.none
        ]
        if offsets_partitions:
            broker.group_coordinator.on_transaction_completed(
                marker.producer_id, offsets_partitions, marker.commit
            )
        answers.append(results)
    return answers


class BrokerMarkerSender:
    """The transaction coordinator's way to the partition leaders (its MarkerSender)."""

    def __init__(self, broker: Broker, transport: NetworkTransport) -> None:
        self._broker = broker
        self._transport = transport

    def leader_of(self, tp: TopicPartition) -> int | None:
        state = self._broker.metadata_cache.partition_state(tp)
        if state is None or state.leader < 0:
            return None
        return int(state.leader)

    def topic_exists(self, topic: str) -> bool:
        return bool(self._broker.metadata_cache.contains_topic(topic))

    async def write_txn_markers(
        self, broker_id: int, markers: list[TxnMarkerEntry]
    ) -> list[dict[TopicPartition, ErrorCode]]:
        if broker_id == self._broker.broker_id:
            return await write_txn_markers(self._broker, markers)
        version = WRITE_TXN_MARKERS_VERSION
        cls = request_class(ApiKey.WRITE_TXN_MARKERS, version)
        assert cls is not None
        request = build_entity(cls, {"markers": [_marker_data(m) for m in markers]})
        body = await self._transport.request(
            broker_id, ApiKey.WRITE_TXN_MARKERS, version, encode_body(request)
        )
        response: Any = decode_response(ApiKey.WRITE_TXN_MARKERS, version, body)
        out: list[dict[TopicPartition, ErrorCode]] = []
        for i, marker in enumerate(markers):
            answer = response.markers[i] if i < len(response.markers) else None
            results = {
                TopicPartition(t.name, p.partition_index): ErrorCode(p.error_code)
                for t in (answer.topics if answer is not None else ())
                for p in t.partitions
            }
            # A partition the answer leaves out was not attempted: tried again.
            for tp in marker.partitions:
                results.setdefault(tp, ErrorCode.unknown_server_error)
            out.append(results)
        return out


def _marker_data(marker: TxnMarkerEntry) -> dict[str, object]:
    topics = by_topic(marker.partitions)
    return {
        "producer_id": marker.producer_id,
        "producer_epoch": marker.producer_epoch,
        "transaction_result": marker.commit,
        "coordinator_epoch": marker.coordinator_epoch,
        "topics": [{"name": n, "partition_indexes": ps} for n, ps in topics.items()],
    }
