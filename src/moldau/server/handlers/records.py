"""DeleteRecords (21) and DescribeLogDirs (35): what Kafka's kafka-delete-records and
kafka-log-dirs ask a broker. Each broker answers for its own logs: deletions on the
partitions it leads, the directories it was configured with."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from moldau.controller.admin import INTERNAL_TOPICS
from moldau.protocol.apis import ApiKey
from moldau.protocol.codec import build_response
from moldau.protocol.errors import ErrorCode
from moldau.replication.delayed import INVALID_LOW_WATERMARK, DeleteRecordsPartitionStatus
from moldau.security.acl import AclOperation as Op
from moldau.security.acl import ResourceType as RT
from moldau.server import authorization as auth
from moldau.server.request import RequestContext, Response
from moldau.storage.partition_name import TopicPartition

if TYPE_CHECKING:
    from moldau.server.broker import Broker


async def handle_delete_records(broker: Broker, ctx: RequestContext) -> Response:
    req = ctx.body()
    # Kafka keeps the last offset given for a partition named twice.
    asked: dict[TopicPartition, int] = {}
    for t in req.topics:
        for p in t.partitions:
            asked[TopicPartition(t.name, p.partition_index)] = p.offset
    status: dict[TopicPartition, DeleteRecordsPartitionStatus] = {}
    offsets: dict[TopicPartition, int] = {}
    deletable = auth.filter_authorized(
        broker.authorizer, ctx, Op.DELETE, RT.TOPIC, (tp.topic for tp in asked)
    )
    for tp, offset in asked.items():
        if tp.topic not in deletable:
            error = ErrorCode.topic_authorization_failed
        elif broker.metadata_cache.partition_state(tp) is None:
            error = ErrorCode.unknown_topic_or_partition
        elif tp.topic in INTERNAL_TOPICS:
            error = ErrorCode.invalid_topic_exception
        else:
            offsets[tp] = offset
            continue
        status[tp] = DeleteRecordsPartitionStatus(-1, INVALID_LOW_WATERMARK, error)
    if offsets:
        future: asyncio.Future[dict[TopicPartition, DeleteRecordsPartitionStatus]] = (
            asyncio.get_running_loop().create_future()
        )

        def respond(result: dict[TopicPartition, DeleteRecordsPartitionStatus]) -> None:
            if not future.done():
                future.set_result(result)

        timeout_ms = int(req.timeout.total_seconds() * 1000)
        broker.replica_manager.delete_records(timeout_ms, offsets, respond)
        status.update(future.result() if future.done() else await future)
    topics: dict[str, list[dict[str, Any]]] = {}
    for tp in asked:
        s = status[tp]
        entry = {"partition_index": tp.partition, "low_watermark": s.low_watermark}
        topics.setdefault(tp.topic, []).append({**entry, "error_code": s.error})
    return build_response(
        ApiKey.DELETE_RECORDS,
        ctx.version,
        {
            "throttle_time": 0,
            "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()],
        },
    )


async def handle_describe_log_dirs(broker: Broker, ctx: RequestContext) -> Response:
    req = ctx.body()
    if not auth.allows_cluster(broker.authorizer, ctx, Op.DESCRIBE):
        # Kafka's answer: no directories (v3+ also say why).
        return build_response(
            ApiKey.DESCRIBE_LOG_DIRS,
            ctx.version,
            {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed,
             "results": []},
        )  # fmt: skip
    wanted: set[TopicPartition] | None = None
    if req.topics is not None:
        wanted = {TopicPartition(t.topic, p) for t in req.topics for p in t.partitions}
    # On the event loop: it reads the logs' state, and costs a statvfs per directory.
    dirs = broker.replica_manager.describe_log_dirs(wanted)
    results = [
        {
            "error_code": d.error,
            "log_dir": str(d.path),
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {
                            "partition_index": p.partition,
                            "partition_size": p.size,
                            "offset_lag": p.offset_lag,
                            "is_future_key": False,
                        }
                        for p in parts
                    ],
                }
                for topic, parts in sorted(d.topics.items())
            ],
            "total_bytes": d.total_bytes,
            "usable_bytes": d.usable_bytes,
        }
        for d in dirs
    ]
    return build_response(
        ApiKey.DESCRIBE_LOG_DIRS,
        ctx.version,
        {"throttle_time": 0, "error_code": ErrorCode.none, "results": results},
    )
