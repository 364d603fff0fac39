"""Fetch (1): consumers and follower replicas read partitions. A fetch
that cannot yet return min_bytes waits in the fetch purgatory (long poll) for new
data or max_wait_ms. Records go out as file slices (sendfile). Fetchers that open a
session (KIP-227, server/fetch_session.py) name and get only what changed. Fetch
v0-v3 read the message formats of magic 0-1: their records are converted on the way
out (protocol/legacy_records.py), as Kafka 3.x did."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from moldau.protocol.errors import ErrorCode, KafkaError, KafkaStorageError
from moldau.protocol.fetch import (
    FetchPartitionResult,
    FetchTopicResult,
    Part,
    encode_fetch_response,
)
from moldau.protocol.legacy_records import MAGIC_V0, MAGIC_V1, cut_message_set, down_convert
from moldau.protocol.records import Compression, codecs_of
from moldau.replication.partition import FetchIsolation
from moldau.replication.replica_manager import FetchParams, FetchPartitionRead
from moldau.security.acl import AclOperation as Op
from moldau.security.acl import ResourceType as RT
from moldau.server import authorization as auth
from moldau.server.fetch_session import FINAL_EPOCH, CachedPartition, SessionKey
from moldau.server.request import RawBody, RequestContext, Response
from moldau.storage.log import FetchDataInfo
from moldau.storage.partition_name import TopicPartition
from moldau.storage.segment import FileRecords

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
    authorizer = broker.authorizer
    max_bytes = req.max_bytes if version >= 3 else 2**31 - 1
    max_bytes = min(max_bytes, broker.config["fetch.max.bytes"])
    quotas = broker.quotas
    # Followers' fetches are never client-quota'd (replication has its own quotas).
    quotaed = replica_id < 0 and (quotas.fetch.enabled or quotas.request.enabled)
    if replica_id >= 0:
        ctx.quota_recorded = True
    elif quotaed and quotas.fetch.enabled:
        # No more than the quota lets through in a window (Kafka: a larger answer
        # would be throttled whatever came before it).
        max_bytes = int(min(max_bytes, quotas.fetch_max_bytes(ctx)))
    params = FetchParams(
        replica_id,
        int(req.max_wait.total_seconds() * 1000),
        min(req.min_bytes, max_bytes),
        max_bytes,
        isolation,
        min_one_message=version >= 3,
    )
    uses_ids = version >= 13
    ids = {v: k for k, v in broker.metadata_cache.topic_ids.items()} if uses_ids else {}
    wanted = []
    for t in req.topics:
        name = ids.get(t.topic_id, "") if uses_ids else t.topic
        topic_id = t.topic_id if uses_ids else None
        for p in t.partitions:
            wanted.append(
                CachedPartition(
                    (topic_id if uses_ids else name, p.partition),
                    TopicPartition(name, p.partition),
                    topic_id,
                    p.fetch_offset,
                    p.current_leader_epoch if version >= 9 else -1,
                    p.partition_max_bytes,
                    p.log_start_offset if version >= 5 else -1,
                    p.last_fetched_epoch if version >= 12 else -1,
                )
            )
    if version >= 7:
        forgotten: list[SessionKey] = [
            (t.topic_id if uses_ids else t.topic, partition)
            for t in req.forgotten_topics_data
            for partition in t.partitions
        ]
        context = broker.fetch_manager.new_context(
            req.session_id, req.session_epoch, replica_id >= 0, uses_ids, wanted, forgotten
        )
    else:
        context = broker.fetch_manager.new_context(0, FINAL_EPOCH, False, False, wanted, [])
    if context.error != ErrorCode.none:
        return RawBody(encode_fetch_response(version, [], error_code=context.error))
    if uses_ids:  # a topic id learnt since the partition joined the session
        for cached in context.partitions:
            if not cached.tp.topic and cached.topic_id in ids:
                cached.tp = TopicPartition(ids[cached.topic_id], cached.tp.partition)

    refused: set[str] = set()
    if authorizer is not None:
        # Per partition, as Kafka answers (Fetch v0-v6 have no top-level error): a
        # consumer needs READ on the topic, a follower CLUSTER_ACTION on the cluster.
        names = {c.tp.topic for c in context.partitions if c.tp.topic}
        if replica_id < 0:
            refused = names - auth.filter_authorized(authorizer, ctx, Op.READ, RT.TOPIC, names)
        elif not auth.allows_cluster(authorizer, ctx, Op.CLUSTER_ACTION):
            refused = names
    # Partitions of unknown topic ids are answered without a read.
    reads = [c.to_read() for c in context.partitions if c.tp.topic and c.tp.topic not in refused]
    future: asyncio.Future[list[FetchPartitionRead]] = asyncio.get_running_loop().create_future()

    def respond(result: list[FetchPartitionRead]) -> None:
        if not future.done():
            future.set_result(result)

    broker.replica_manager.fetch_messages(params, reads, respond)
    if future.done():
        done = future.result()
    else:
        waited = broker.clock.monotonic_ns()
        done = await future
        # The long poll is not this request's use of the broker (request quota).
        ctx.waited_ns += broker.clock.monotonic_ns() - waited
    by_tp = {r.tp: r for r in done}
    results = []
    for cached in context.partitions:
        read = by_tp.get(cached.tp) if cached.tp.topic else None
        if read is None:
            error = ErrorCode.unknown_topic_or_partition
            if not cached.tp.topic:
                error = ErrorCode.unknown_topic_id
            elif cached.tp.topic in refused:
                error = ErrorCode.topic_authorization_failed
            read = FetchPartitionRead(cached.tp, cached.fetch_offset, -1, 0, error=error)
        results.append(read)
    if quotaed:
        size = sum(r.info.data.size for r in results if r.info is not None and r.error == 0)
        throttle_ms = quotas.on_fetch(ctx, size)
        if throttle_ms > 0:
            # Kafka answers a throttled fetch with no partitions at all (its
            # getThrottledResponse); the session, if any, stays as it is.
            return RawBody(
                encode_fetch_response(
                    version, [], session_id=context.throttled_session_id,
                    throttle_time_ms=throttle_ms,
                )
            )  # fmt: skip
    session_id, answer = context.respond(results)

    topics: list[FetchTopicResult] = []
    for cached, read in answer:
        result = FetchPartitionResult(cached.tp.partition, read.error)
        if read.info is not None:
            result.high_watermark = read.info.high_watermark
            result.last_stable_offset = read.info.last_stable_offset
            result.log_start_offset = read.info.log_start_offset
            result.records = read.info.data.records if read.error == ErrorCode.none else None
            result.diverging_epoch = read.info.diverging_epoch
            if (aborted := read.info.aborted_transactions) is not None:
                result.aborted_transactions = [(t.producer_id, t.first_offset) for t in aborted]
        try:
            if 4 <= version < 10 and result.records and _holds_zstd(result.records):
                # KIP-110: clients of Fetch below v10 are older than zstd (Kafka 2.1).
                result.error_code, result.records = ErrorCode.unsupported_compression_type, None
            elif (
                version < 4
                and read.error == ErrorCode.none
                and not _downconverts(broker, cached.tp.topic)
            ):
                # As Kafka: with message.downconversion.enable=false, old fetchers are refused.
                result.error_code, result.records = ErrorCode.unsupported_version, None
            elif version < 4 and result.records and read.info is not None:
                # A few µs a record: on a worker thread, the event loop serving others.
                result.records = await asyncio.to_thread(
                    in_message_format, version, read.info.data, cached.max_bytes
                )
        except KafkaError as e:
            result.error_code, result.records = e.code, None
        if result.records is None:
            result.records = b""
        # Consecutive partitions of one topic go under one topic entry, as Kafka's.
        last = topics[-1] if topics else None
        if last is None or (last.topic, last.topic_id) != (cached.tp.topic, cached.topic_id):
            topics.append(FetchTopicResult(cached.tp.topic, [], cached.topic_id))
        topics[-1].partitions.append(result)
    return RawBody(
        encode_fetch_response(
            version, topics, session_id=session_id, throttle_time_ms=ctx.throttle_ms
        )
    )


def in_message_format(version: int, data: FetchDataInfo, max_bytes: int) -> bytes:
    """Fetch v0-v3's records: whole batches as a message set of magic 0 (v0-v1) or 1
    (v2-v3) within `max_bytes`; a first batch cut by the limit goes as it is, for the
    client to learn that its fetch size is too small (as from Kafka)."""
    records = data.records if isinstance(data.records, bytes) else _read(data.records)
    if data.first_entry_incomplete:
        return records
    magic = MAGIC_V0 if version <= 1 else MAGIC_V1
    converted = down_convert(records, magic, data.fetch_offset)
    return cut_message_set(converted, max_bytes, min_one_message=version >= 3)


def _read(records: FileRecords) -> bytes:
    """The slice's bytes (its file is held open, so a segment deleted since the read
    still gives them); a failing disk is the partition's KAFKA_STORAGE_ERROR."""
    try:
        return records.read()
    except OSError as e:
        raise KafkaStorageError(f"reading records failed: {e}") from e


def _holds_zstd(records: Part) -> bool:
    if isinstance(records, FileRecords):
        try:
            return Compression.ZSTD in records.codecs()
        except OSError as e:
            raise KafkaStorageError(f"reading batch headers failed: {e}") from e
    buf = memoryview(records)  # type: ignore[arg-type]
    return Compression.ZSTD in codecs_of(lambda pos, n: buf[pos : pos + n], 0, len(buf))


def _downconverts(broker: Broker, topic: str) -> bool:
    return bool(broker.config_manager.values(topic)["message.downconversion.enable"])
