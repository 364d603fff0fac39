"""The follower's Fetch requests on the wire (the FetchClient of replication/fetcher.py):
Fetch v12 with `replica_id` set, to the leader's inter-broker listener, over one
connection per fetcher and leader (the controller link's transport, which resolves
endpoints and starts afresh after an error), each in an incremental fetch session;
and the ListOffsets v7 a follower sends for the leader's log end or start after
OFFSET_OUT_OF_RANGE, over the same connection (its fetcher has no fetch out then)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta

from kio.schema.fetch.v12 import request as rq
from kio.schema.fetch.v12 import response as rs
from kio.schema.list_offsets.v7 import request as lrq
from kio.schema.list_offsets.v7 import response as lrs
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i32Timedelta, i64

from moldau.protocol.apis import ApiKey
from moldau.protocol.codec import decode_response, encode_body
from moldau.protocol.errors import ErrorCode, error_class
from moldau.replication.fetch_session_handler import FetchSessionHandler
from moldau.replication.fetcher import FetcherConfig, FollowerFetchPartition, FollowerFetchResult
from moldau.server.control_client import NetworkTransport
from moldau.storage.partition_name import TopicPartition

VERSION = 12
# Kafka's brokers of 3.x send v7 (MetadataVersion.listOffsetRequestVersion); flexible,
# as the transport's request header v2 needs.
LIST_OFFSETS_VERSION = 7
# Top-level errors that only say the session is gone: fetch again, in full, at once.
SESSION_ERRORS = (
    ErrorCode.fetch_session_id_not_found,
    ErrorCode.invalid_fetch_session_epoch,
    ErrorCode.fetch_session_topic_id_error,
)


class NetworkFetchClient:
    def __init__(self, new_transport: Callable[[], NetworkTransport]) -> None:
        self.new_transport = new_transport
        self.transports: dict[int, NetworkTransport] = {}  # by fetcher id
        self.sessions: dict[tuple[int, int], FetchSessionHandler] = {}  # (leader, fetcher)

    async def close(self) -> None:
        for transport in self.transports.values():
            await transport.close()

    def _transport(self, fetcher_id: int) -> NetworkTransport:
        transport = self.transports.get(fetcher_id)
        if transport is None:
            transport = self.transports[fetcher_id] = self.new_transport()
        return transport

    async def fetch(
        self,
        leader_id: int,
        fetcher_id: int,
        replica_id: int,
        config: FetcherConfig,
        partitions: Sequence[FollowerFetchPartition],
    ) -> list[FollowerFetchResult]:
        transport = self._transport(fetcher_id)
        session = self.sessions.setdefault((leader_id, fetcher_id), FetchSessionHandler())
        fetch = session.build(partitions)
        by_topic: dict[str, list[FollowerFetchPartition]] = {}
        for p in fetch.to_send:
            by_topic.setdefault(p.tp.topic, []).append(p)
        forgotten: dict[str, list[int]] = {}
        for tp in fetch.to_forget:
            forgotten.setdefault(tp.topic, []).append(tp.partition)
        request = rq.FetchRequest(
            cluster_id=None,
            replica_id=BrokerId(replica_id),
            max_wait=i32Timedelta.parse(timedelta(milliseconds=config.max_wait_ms)),
            min_bytes=i32(config.min_bytes),
            max_bytes=i32(config.response_max_bytes),
            isolation_level=i8(0),
            session_id=i32(fetch.session_id),
            session_epoch=i32(fetch.epoch),
            topics=tuple(
                rq.FetchTopic(
                    topic=TopicName(topic),
                    partitions=tuple(
                        rq.FetchPartition(
                            partition=i32(p.tp.partition),
                            current_leader_epoch=i32(p.current_leader_epoch),
                            fetch_offset=i64(p.fetch_offset),
                            last_fetched_epoch=i32(p.last_fetched_epoch),
                            log_start_offset=i64(p.log_start_offset),
                            partition_max_bytes=i32(p.max_bytes),
                        )
                        for p in group
                    ),
                )
                for topic, group in by_topic.items()
            ),
            forgotten_topics_data=tuple(
                rq.ForgottenTopic(topic=TopicName(topic), partitions=tuple(i32(n) for n in numbers))
                for topic, numbers in forgotten.items()
            ),
            rack_id="",
        )
        try:
            body = await transport.request(leader_id, ApiKey.FETCH, VERSION, encode_body(request))
            response = decode_response(ApiKey.FETCH, VERSION, body)
            assert isinstance(response, rs.FetchResponse)
        except BaseException:
            session.handle_error()
            raise
        if not session.handle_response(fetch, response.error_code, response.session_id):
            if response.error_code in SESSION_ERRORS:
                return []
            return [FollowerFetchResult(p.tp, response.error_code) for p in partitions]
        results = []
        for t in response.responses:
            for d in t.partitions:
                diverging = None
                if d.diverging_epoch.epoch >= 0 or d.diverging_epoch.end_offset >= 0:
                    diverging = (d.diverging_epoch.epoch, d.diverging_epoch.end_offset)
                results.append(
                    FollowerFetchResult(
                        TopicPartition(t.topic, d.partition_index),
                        d.error_code,
                        d.high_watermark,
                        d.log_start_offset,
                        diverging,
                        d.records,
                    )
                )
        return results

    async def list_offset(
        self,
        leader_id: int,
        fetcher_id: int,
        replica_id: int,
        tp: TopicPartition,
        current_leader_epoch: int,
        timestamp: int,
    ) -> int:
        request = lrq.ListOffsetsRequest(
            replica_id=BrokerId(replica_id),
            isolation_level=i8(0),
            topics=(
                lrq.ListOffsetsTopic(
                    name=TopicName(tp.topic),
                    partitions=(
                        lrq.ListOffsetsPartition(
                            partition_index=i32(tp.partition),
                            current_leader_epoch=i32(current_leader_epoch),
                            timestamp=i64(timestamp),
                        ),
                    ),
                ),
            ),
        )
        body = await self._transport(fetcher_id).request(
            leader_id, ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, encode_body(request)
        )
        response = decode_response(ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, body)
        assert isinstance(response, lrs.ListOffsetsResponse)
        for t in response.topics:
            for d in t.partitions:
                if t.name == tp.topic and d.partition_index == tp.partition:
                    if d.error_code != ErrorCode.none:
                        raise error_class(d.error_code)(
                            f"ListOffsets of {tp} from broker {leader_id}"
                        )
                    return int(d.offset)
        raise ConnectionError(f"broker {leader_id} answered ListOffsets without {tp}")
