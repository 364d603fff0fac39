"""ListOffsets (2): earliest, latest, max timestamp, or the first offset at or after a
timestamp, per partition; v0, Kafka 0.8's form, lists segment start offsets instead."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from moldau.protocol.apis import ApiKey
from moldau.protocol.codec import build_response
from moldau.protocol.errors import ErrorCode, KafkaError, TopicAuthorizationFailedError
from moldau.replication.partition import FetchIsolation
from moldau.security.acl import AclOperation as Op
from moldau.security.acl import ResourceType as RT
from moldau.server import authorization as auth
from moldau.server.handlers.fetch import READ_COMMITTED
from moldau.server.request import RequestContext, Response
from moldau.storage.partition_name import TopicPartition

if TYPE_CHECKING:
    from moldau.server.broker import Broker


async def handle_list_offsets(broker: Broker, ctx: RequestContext) -> Response:
    req = ctx.body()
    version = ctx.version
    if version == 0:
        return _list_offsets_v0(broker, ctx, req)
    if req.replica_id != -1:
        # Only a consumer's request has an isolation level (Kafka's isClientRequest):
        # a follower's and a debugging replica's (-2) are answered up to the log end.
        isolation = FetchIsolation.LOG_END
    elif version >= 2 and req.isolation_level == READ_COMMITTED:
        isolation = FetchIsolation.TXN_COMMITTED
    else:
        isolation = FetchIsolation.HIGH_WATERMARK
    topics = []
    described = auth.filter_authorized(
        broker.authorizer, ctx, Op.DESCRIBE, RT.TOPIC, (t.name for t in req.topics)
    )
    for t in req.topics:
        partitions: list[dict[str, Any]] = []
        for p in t.partitions:
            tp = TopicPartition(t.name, p.partition_index)
            entry: dict[str, Any] = {
                "partition_index": p.partition_index,
                "timestamp": -1,
                "offset": -1,
            }
            try:
                if t.name not in described:
                    raise TopicAuthorizationFailedError(t.name)
                partition = broker.replica_manager.get_partition_or_error(tp)
                found = partition.fetch_offset_for_timestamp(
                    p.timestamp,
                    isolation,
                    p.current_leader_epoch if version >= 4 else -1,
                    fetch_only_from_leader=req.replica_id != -2,
                )
                entry["error_code"] = ErrorCode.none
                if found is not None:
                    entry["timestamp"], entry["offset"], entry["leader_epoch"] = found
            except KafkaError as e:
                entry["error_code"] = e.code
            partitions.append(entry)
        topics.append({"name": t.name, "partitions": partitions})
    return build_response(ApiKey.LIST_OFFSETS, version, {"throttle_time": 0, "topics": topics})


def _list_offsets_v0(broker: Broker, ctx: RequestContext, req: Any) -> Response:
    topics = []
    described = auth.filter_authorized(
        broker.authorizer, ctx, Op.DESCRIBE, RT.TOPIC, (t.name for t in req.topics)
    )
    for t in req.topics:
        partitions: list[dict[str, Any]] = []
        for p in t.partitions:
            entry: dict[str, Any] = {"partition_index": p.partition_index}
            try:
                if t.name not in described:
                    raise TopicAuthorizationFailedError(t.name)
                partition = broker.replica_manager.get_partition_or_error(
                    TopicPartition(t.name, p.partition_index)
                )
                entry["old_style_offsets"] = partition.legacy_fetch_offsets_for_timestamp(
                    p.timestamp,
                    p.max_num_offsets,
                    from_consumer=req.replica_id == -1,
                    fetch_only_from_leader=req.replica_id != -2,
                )
                entry["error_code"] = ErrorCode.none
            except KafkaError as e:
                entry["error_code"] = e.code
            partitions.append(entry)
        topics.append({"name": t.name, "partitions": partitions})
    return build_response(ApiKey.LIST_OFFSETS, 0, {"topics": topics})
