"""Fetch (1): consumers (and, later, follower replicas) read partitions. A fetch
that cannot yet return min_bytes waits in the fetch purgatory (long poll) for new
data or max_wait_ms. Records go out as file slices (sendfile)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from moldau.protocol.errors import ErrorCode
from moldau.protocol.fetch import FetchPartitionResult, FetchTopicResult, encode_fetch_response
from moldau.replication.partition import FetchIsolation
from moldau.replication.replica_manager import FetchParams, FetchPartitionRead
from moldau.server.request import RawBody, RequestContext, Response
from moldau.storage.partition_name import TopicPartition

if TYPE_CHECKING:
    from moldau.server.broker import Broker

READ_COMMITTED = 1


async def handle_fetch(broker: Broker, ctx: RequestContext) -> Response:
    req = ctx.body()
    version = ctx.version
    replica_id = req.replica_id if hasattr(req, "replica_id") else -1
    if replica_id >= 0:
        isolation = FetchIsolation.LOG_END
    elif version >= 4 and req.isolation_level == READ_COMMITTED:
        isolation = FetchIsolation.TXN_COMMITTED
    else:
        isolation = FetchIsolation.HIGH_WATERMARK
    max_bytes = req.max_bytes if version >= 3 else 2**31 - 1
    max_bytes = min(max_bytes, broker.config["fetch.max.bytes"])
    params = FetchParams(
        replica_id,
        int(req.max_wait.total_seconds() * 1000),
        req.min_bytes,
        max_bytes,
        isolation,
    )
    reads: list[FetchPartitionRead] = []
    layout: list[tuple[str, object, list[TopicPartition]]] = []
    unknown: dict[TopicPartition, ErrorCode] = {}
    ids = {v: k for k, v in broker.metadata_cache.topic_ids.items()} if version >= 13 else {}
    for t in req.topics:
        name = t.topic if version < 13 else ids.get(t.topic_id, "")
        tps = []
        for p in t.partitions:
            tp = TopicPartition(name, p.partition)
            tps.append(tp)
            if not name:
                unknown[tp] = ErrorCode.unknown_topic_id
                continue
            reads.append(
                FetchPartitionRead(
                    tp,
                    p.fetch_offset,
                    p.current_leader_epoch if version >= 9 else -1,
                    p.partition_max_bytes,
                    p.log_start_offset if version >= 5 else -1,
                    p.last_fetched_epoch if version >= 12 else -1,
                )
            )
        layout.append((name, getattr(t, "topic_id", None), tps))

    future: asyncio.Future[list[FetchPartitionRead]] = asyncio.get_running_loop().create_future()

    def respond(result: list[FetchPartitionRead]) -> None:
        if not future.done():
            future.set_result(result)

    broker.replica_manager.fetch_messages(params, reads, respond)
    done = future.result() if future.done() else await future
    by_tp = {r.tp: r for r in done}
    topics = []
    for name, topic_id, tps in layout:
        results = []
        for tp in tps:
            r = by_tp.get(tp)
            if r is None:
                results.append(
                    FetchPartitionResult(
                        tp.partition, unknown.get(tp, ErrorCode.unknown_topic_or_partition)
                    )
                )
                continue
            result = FetchPartitionResult(tp.partition, r.error)
            if r.info is not None:
                result.high_watermark = r.info.high_watermark
                result.last_stable_offset = r.info.last_stable_offset
                result.log_start_offset = r.info.log_start_offset
                result.records = r.info.data.records if r.error == ErrorCode.none else None
                result.diverging_epoch = r.info.diverging_epoch
            if result.records is None:
                result.records = b""
            results.append(result)
        topics.append(FetchTopicResult(name, results, topic_id))  # type: ignore[arg-type]
    return RawBody(encode_fetch_response(version, topics, session_id=0))
