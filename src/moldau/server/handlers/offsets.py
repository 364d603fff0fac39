"""FindCoordinator (10), OffsetCommit (8), OffsetFetch (9)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from moldau.controller.admin import TRANSACTION_STATE_TOPIC as TRANSACTION_STATE
from moldau.controller.admin import NewTopic
from moldau.coordinator.group_coordinator import OffsetCommitEntry
from moldau.coordinator.group_metadata_manager import CONSUMER_OFFSETS
from moldau.coordinator.transaction import log as txn_log
from moldau.protocol.apis import ApiKey
from moldau.protocol.codec import build_response
from moldau.protocol.errors import (
    CoordinatorNotAvailableError,
    ErrorCode,
    KafkaError,
    TopicAlreadyExistsError,
)
from moldau.security.acl import AclOperation as Op
from moldau.security.acl import ResourceType as RT
from moldau.server import authorization as auth
from moldau.server.request import RequestContext, Response
from moldau.storage.partition_name import TopicPartition

if TYPE_CHECKING:
    from moldau.server.broker import Broker

GROUP_KEY = 0
TRANSACTION_KEY = 1


async def _ensure_offsets_topic(broker: Broker) -> None:
    """Create __consumer_offsets on first use, with Kafka's settings for it."""
    config = broker.config
    await _ensure_internal_topic(
        broker,
        CONSUMER_OFFSETS,
        config["offsets.topic.num.partitions"],
        "offsets.topic.replication.factor",
        {
            "cleanup.policy": "compact",
            "compression.type": "producer",
            "segment.bytes": str(config["offsets.topic.segment.bytes"]),
        },
    )


async def _ensure_transaction_state_topic(broker: Broker) -> None:
    """Create __transaction_state on first use, with Kafka's settings for it; its
    min.insync.replicas is capped by its replication factor (the embedded broker
    alone could not write it otherwise)."""
    config = broker.config
    await _ensure_internal_topic(
        broker,
        TRANSACTION_STATE,
        config["transaction.state.log.num.partitions"],
        "transaction.state.log.replication.factor",
        txn_log.topic_configs(segment_bytes=config["transaction.state.log.segment.bytes"]),
        min_isr=config["transaction.state.log.min.isr"],
    )


async def _ensure_internal_topic(
    broker: Broker,
    name: str,
    partitions: int,
    rf_key: str,
    configs: dict[str, str],
    min_isr: int | None = None,
) -> int:
    """Create an internal topic on first use. Kafka waits for `rf_key` live brokers
    rather than create it under-replicated; the embedded broker is alone unless told
    otherwise. Returns its replication factor."""
    config = broker.config
    rf = config[rf_key]
    if not config["zookeeper.connect"] and not config.is_set(rf_key):
        rf = 1
    if broker.metadata_cache.contains_topic(name):
        return int(rf)
    alive = len(broker.metadata_cache.brokers)
    if alive < rf:
        broker.offsets_topic_report.report(alive, rf, name, rf_key)
        raise CoordinatorNotAvailableError(f"{alive} live brokers; {rf_key} is {rf}")
    if min_isr is not None:
        configs = {**configs, "min.insync.replicas": str(min(min_isr, rf))}
    topic = NewTopic(name, partitions, rf, configs=configs)
    with contextlib.suppress(TopicAlreadyExistsError):
        await broker.admin_manager.create_topic(topic, timeout_ms=0)
    return int(rf)


async def _coordinator(broker: Broker, key: str, key_type: int, listener: str) -> dict[str, Any]:
    result: dict[str, Any] = {"key": key, "node_id": -1, "host": "", "port": -1}
    if key_type not in (GROUP_KEY, TRANSACTION_KEY):
        result["error_code"] = ErrorCode.invalid_request
        result["error_message"] = f"unknown coordinator key type {key_type}"
        return result
    if not key:
        result["error_code"] = ErrorCode.invalid_request
        result["error_message"] = (
            "group id is empty" if key_type == GROUP_KEY else "transactional id is empty"
        )
        return result
    try:
        if key_type == GROUP_KEY:
            await _ensure_offsets_topic(broker)
            tp = TopicPartition(CONSUMER_OFFSETS, broker.group_coordinator.partition_for(key))
        else:
            await _ensure_transaction_state_topic(broker)
            tp = TopicPartition(TRANSACTION_STATE, broker.txn_coordinator.partition_for(key))
    except KafkaError as e:
        result["error_code"] = ErrorCode.coordinator_not_available
        result["error_message"] = e.message or None
        return result
    state = broker.metadata_cache.partition_state(tp)
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
    authorizer = broker.authorizer

    async def find(key: str) -> dict[str, Any]:
        if authorizer is not None and key_type in (GROUP_KEY, TRANSACTION_KEY):
            group = key_type == GROUP_KEY
            rt = RT.GROUP if group else RT.TRANSACTIONAL_ID
            if not auth.allows(authorizer, ctx, Op.DESCRIBE, rt, key):
                code = (
                    ErrorCode.group_authorization_failed
                    if group
                    else ErrorCode.transactional_id_authorization_failed
                )
                return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": code}
        return await _coordinator(broker, key, key_type, listener)

    if version >= 4:
        coordinators = [await find(k) for k in req.coordinator_keys]
        return build_response(
            ApiKey.FIND_COORDINATOR, version, {"throttle_time": 0, "coordinators": coordinators}
        )
    found = await find(req.key)
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
    authorizer = broker.authorizer
    if authorizer is not None and not auth.allows(authorizer, ctx, Op.READ, RT.GROUP, req.group_id):
        # Every partition answers GROUP_AUTHORIZATION_FAILED (Kafka's KafkaApis).
        refused = {TopicPartition(t.name, p.partition_index): ErrorCode.group_authorization_failed
                   for t in req.topics for p in t.partitions}  # fmt: skip
        topics = commit_results(req.topics, refused)
        return build_response(
            ApiKey.OFFSET_COMMIT, ctx.version, {"throttle_time": 0, "topics": topics}
        )
    readable = auth.filter_authorized(
        authorizer, ctx, Op.READ, RT.TOPIC, (t.name for t in req.topics)
    )
    await _ensure_offsets_topic_for_v0(broker, ctx.version)
    offsets: dict[TopicPartition, OffsetCommitEntry] = {}
    results: dict[TopicPartition, ErrorCode] = {}
    for t in req.topics:
        for p in t.partitions:
            tp = TopicPartition(t.name, p.partition_index)
            if t.name not in readable:
                results[tp] = ErrorCode.topic_authorization_failed
                continue
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
    topics = commit_results(req.topics, results)
    return build_response(ApiKey.OFFSET_COMMIT, ctx.version, {"throttle_time": 0, "topics": topics})


def commit_results(
    topics: Any, results: Mapping[TopicPartition, ErrorCode]
) -> list[dict[str, Any]]:
    """An offset commit's answer (OffsetCommit, TxnOffsetCommit): each partition
    asked, in the request's order, with its error."""
    return [
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
        for t in topics
    ]


def _fetch_group(
    broker: Broker,
    ctx: RequestContext,
    group_id: str,
    topics: Any,
    require_stable: bool = False,
) -> tuple[ErrorCode, list[dict[str, Any]]]:
    authorizer = broker.authorizer
    if authorizer is not None and not auth.allows(authorizer, ctx, Op.DESCRIBE, RT.GROUP, group_id):
        return ErrorCode.group_authorization_failed, []
    wanted = None
    if topics is not None:
        wanted = [TopicPartition(t.name, p) for t in topics for p in t.partition_indexes]
    coordinator = broker.group_coordinator
    error, found = coordinator.fetch_offsets(group_id, wanted)
    listed = wanted if wanted is not None else sorted(found)
    # Topics the principal may not describe: named ones are refused, the others left
    # out of an all-topics answer.
    visible = auth.filter_authorized(
        authorizer, ctx, Op.DESCRIBE, RT.TOPIC, (tp.topic for tp in listed)
    )
    if wanted is None:
        listed = [tp for tp in listed if tp.topic in visible]
    # KIP-447: a consumer that requires stable offsets waits out commits in flight
    # (in a transaction not ended yet); it retries on UNSTABLE_OFFSET_COMMIT.
    unstable = (
        coordinator.unstable_offsets(group_id, listed)
        if require_stable and error == ErrorCode.none
        else set()
    )
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for tp in listed:
        committed = None if tp in unstable else found.get(tp)
        code = error if wanted is not None and error != ErrorCode.none else ErrorCode.none
        if tp in unstable:
            code = ErrorCode.unstable_offset_commit
        if tp.topic not in visible:
            committed, code = None, ErrorCode.topic_authorization_failed
        by_topic.setdefault(tp.topic, []).append(
            {
                "partition_index": tp.partition,
                "committed_offset": committed.offset if committed else -1,
                "committed_leader_epoch": committed.leader_epoch if committed else -1,
                "metadata": committed.metadata if committed else "",
                "error_code": code,
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
            error, topics = _fetch_group(broker, ctx, g.group_id, g.topics, req.require_stable)
            groups.append({"group_id": g.group_id, "topics": topics, "error_code": error})
        return build_response(ApiKey.OFFSET_FETCH, version, {"throttle_time": 0, "groups": groups})
    error, topics = _fetch_group(
        broker, ctx, req.group_id, req.topics, version >= 7 and req.require_stable
    )
    if version < 2 and error != ErrorCode.none:
        # v0-1 have no top-level error: it is reported per partition.
        error = ErrorCode.none
    return build_response(
        ApiKey.OFFSET_FETCH, version, {"throttle_time": 0, "topics": topics, "error_code": error}
    )
