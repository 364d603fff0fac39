"""FindCoordinator (10), OffsetCommit (8), OffsetFetch (9)."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from moldau.controller.admin import NewTopic
from moldau.coordinator.group_coordinator import OffsetCommitEntry
from moldau.coordinator.group_metadata_manager import CONSUMER_OFFSETS
from moldau.protocol.apis import ApiKey
from moldau.protocol.codec import build_response
from moldau.protocol.errors import (
    CoordinatorNotAvailableError,
    ErrorCode,
    KafkaError,
    TopicAlreadyExistsError,
)
from moldau.server.request import RequestContext, Response
from moldau.storage.partition_name import TopicPartition

if TYPE_CHECKING:
    from moldau.server.broker import Broker

GROUP_KEY = 0


async def _ensure_offsets_topic(broker: Broker) -> None:
    """Create __consumer_offsets on first use, with Kafka's settings for it."""
    if broker.metadata_cache.contains_topic(CONSUMER_OFFSETS):
        return
    config = broker.config
    rf = config["offsets.topic.replication.factor"]
    if not config["zookeeper.connect"] and not config.is_set("offsets.topic.replication.factor"):
        rf = 1  # the embedded broker is alone unless told otherwise
    alive = len(broker.metadata_cache.brokers)
    if alive < rf:
        # Kafka waits for enough brokers rather than create it under-replicated.
        broker.offsets_topic_report.report(alive, rf)
        raise CoordinatorNotAvailableError(
            f"{alive} live brokers; offsets.topic.replication.factor is {rf}"
        )
    topic = NewTopic(
        CONSUMER_OFFSETS,
        config["offsets.topic.num.partitions"],
        rf,
        configs={
            "cleanup.policy": "compact",
            "compression.type": "producer",
            "segment.bytes": str(config["offsets.topic.segment.bytes"]),
        },
    )
    with contextlib.suppress(TopicAlreadyExistsError):
        await broker.admin_manager.create_topic(topic, timeout_ms=0)


async def _coordinator(broker: Broker, key: str, key_type: int, listener: str) -> dict[str, Any]:
    result: dict[str, Any] = {"key": key, "node_id": -1, "host": "", "port": -1}
    if key_type != GROUP_KEY:
        result["error_code"] = ErrorCode.coordinator_not_available
        result["error_message"] = "transactions are not supported"
        return result
    if not key:
        result["error_code"] = ErrorCode.invalid_request
        result["error_message"] = "group id is empty"
        return result
    try:
        await _ensure_offsets_topic(broker)
    except KafkaError as e:
        result["error_code"] = ErrorCode.coordinator_not_available
        result["error_message"] = e.message or None
        return result
    state = broker.metadata_cache.partition_state(
        TopicPartition(CONSUMER_OFFSETS, broker.group_coordinator.partition_for(key))
    )
    endpoint = None if state is None else broker.metadata_cache.endpoint(state.leader, listener)
    if state is None or endpoint is None:
        result["error_code"] = ErrorCode.coordinator_not_available
        return result
    result.update(
        node_id=state.leader, host=endpoint[0], port=endpoint[1], error_code=ErrorCode.none
    )
    return result


async def handle_find_coordinator(broker: Broker, ctx: RequestContext) -> Response:
    req = ctx.body()
    version = ctx.version
    listener = ctx.client.listener
    key_type = req.key_type if version >= 1 else GROUP_KEY
    if version >= 4:
        coordinators = [
            await _coordinator(broker, k, key_type, listener) for k in req.coordinator_keys
        ]
        return build_response(
            ApiKey.FIND_COORDINATOR, version, {"throttle_time": 0, "coordinators": coordinators}
        )
    found = await _coordinator(broker, req.key, key_type, listener)
    found.pop("key")
    found["throttle_time"] = 0
    return build_response(ApiKey.FIND_COORDINATOR, version, found)


async def _ensure_offsets_topic_for_v0(broker: Broker, version: int) -> None:
    """Clients of Kafka 0.8.1 send OffsetCommit and OffsetFetch v0 to any broker,
    without FindCoordinator, which is what creates __consumer_offsets: create it
    here (they retry NOT_COORDINATOR until it is ready)."""
    if version == 0:
        with contextlib.suppress(KafkaError):  # answered as not coordinator for now
            await _ensure_offsets_topic(broker)


async def handle_offset_commit(broker: Broker, ctx: RequestContext) -> Response:
    req = ctx.body()
    await _ensure_offsets_topic_for_v0(broker, ctx.version)
    offsets: dict[TopicPartition, OffsetCommitEntry] = {}
    results: dict[TopicPartition, ErrorCode] = {}
    for t in req.topics:
        for p in t.partitions:
            tp = TopicPartition(t.name, p.partition_index)
            if not broker.metadata_cache.contains_topic(t.name):
                results[tp] = ErrorCode.unknown_topic_or_partition
                continue
            offsets[tp] = OffsetCommitEntry(
                p.committed_offset,
                getattr(p, "committed_leader_epoch", -1),
                p.committed_metadata,
                getattr(p, "commit_timestamp", -1),  # v1 only
            )
    if offsets:
        # v0 has no generation or member: a commit from outside any generation, as
        # a consumer without a group makes (Kafka 3.x stores it as any other).
        results.update(
            await broker.group_coordinator.commit_offsets(
                req.group_id,
                getattr(req, "generation_id_or_member_epoch", -1),
                offsets,
                getattr(req, "member_id", ""),
                getattr(req, "group_instance_id", None),
            )
        )
    topics = [
        {
            "name": t.name,
            "partitions": [
                {
                    "partition_index": p.partition_index,
                    "error_code": results[TopicPartition(t.name, p.partition_index)],
                }
                for p in t.partitions
            ],
        }
        for t in req.topics
    ]
    return build_response(ApiKey.OFFSET_COMMIT, ctx.version, {"throttle_time": 0, "topics": topics})


def _fetch_group(
    broker: Broker, group_id: str, topics: Any
) -> tuple[ErrorCode, list[dict[str, Any]]]:
    wanted = None
    if topics is not None:
        wanted = [TopicPartition(t.name, p) for t in topics for p in t.partition_indexes]
    error, found = broker.group_coordinator.fetch_offsets(group_id, wanted)
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for tp in wanted if wanted is not None else sorted(found):
        committed = found.get(tp)
        by_topic.setdefault(tp.topic, []).append(
            {
                "partition_index": tp.partition,
                "committed_offset": committed.offset if committed else -1,
                "committed_leader_epoch": committed.leader_epoch if committed else -1,
                "metadata": committed.metadata if committed else "",
                "error_code": error
                if wanted is not None and error != ErrorCode.none
                else ErrorCode.none,
            }
        )
    return error, [{"name": name, "partitions": parts} for name, parts in by_topic.items()]


async def handle_offset_fetch(broker: Broker, ctx: RequestContext) -> Response:
    req = ctx.body()
    version = ctx.version
    await _ensure_offsets_topic_for_v0(broker, version)
    if version >= 8:
        groups = []
        for g in req.groups:
            error, topics = _fetch_group(broker, g.group_id, g.topics)
            groups.append({"group_id": g.group_id, "topics": topics, "error_code": error})
        return build_response(ApiKey.OFFSET_FETCH, version, {"throttle_time": 0, "groups": groups})
    error, topics = _fetch_group(broker, req.group_id, req.topics)
    if version < 2 and error != ErrorCode.none:
        # v0-1 have no top-level error: it is reported per partition.
        error = ErrorCode.none
    return build_response(
        ApiKey.OFFSET_FETCH, version, {"throttle_time": 0, "topics": topics, "error_code": error}
    )
