"""OffsetForLeaderEpoch (23): where a leader epoch ends in this leader's log (the
largest epoch at or below the one asked, and the offset where the next one starts),
as consumers use it to detect a log truncated under them (KIP-320)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from moldau.protocol.apis import ApiKey
from moldau.protocol.codec import build_response
from moldau.protocol.errors import ErrorCode, KafkaError, TopicAuthorizationFailedError
from moldau.security.acl import AclOperation as Op
from moldau.security.acl import ResourceType as RT
from moldau.server import authorization as auth
from moldau.server.request import RequestContext, Response
from moldau.storage.partition_name import TopicPartition

if TYPE_CHECKING:
    from moldau.server.broker import Broker

# A replica id that may ask a follower (tools); everyone else must ask the leader.
DEBUGGING_REPLICA_ID = -2


async def handle_offset_for_leader_epoch(broker: Broker, ctx: RequestContext) -> Response:
    req = ctx.body()
    replica_id = req.replica_id if ctx.version >= 3 else -1
    authorizer = broker.authorizer
    if replica_id >= 0 and authorizer is not None:
        # A follower's: CLUSTER_ACTION, else every topic is refused (Kafka's KafkaApis).
        ok = auth.allows_cluster(authorizer, ctx, Op.CLUSTER_ACTION)
        described = {t.topic for t in req.topics} if ok else set()
    else:
        described = auth.filter_authorized(
            authorizer, ctx, Op.DESCRIBE, RT.TOPIC, (t.topic for t in req.topics)
        )
    topics = []
    for t in req.topics:
        partitions: list[dict[str, Any]] = []
        for p in t.partitions:
            entry: dict[str, Any] = {"partition": p.partition, "leader_epoch": -1, "end_offset": -1}
            try:
                if t.topic not in described:
                    raise TopicAuthorizationFailedError(t.topic)
                partition = broker.replica_manager.get_partition_or_error(
                    TopicPartition(t.topic, p.partition)
                )
                epoch, end = partition.last_offset_for_leader_epoch(
                    getattr(p, "current_leader_epoch", -1),  # v2+
                    p.leader_epoch,
                    replica_id != DEBUGGING_REPLICA_ID,
                )
                entry.update(error_code=ErrorCode.none, leader_epoch=epoch, end_offset=end)
            except KafkaError as e:
                entry["error_code"] = e.code
            partitions.append(entry)
        topics.append({"topic": t.topic, "partitions": partitions})
    return build_response(
        ApiKey.OFFSET_FOR_LEADER_EPOCH, ctx.version, {"throttle_time": 0, "topics": topics}
    )
