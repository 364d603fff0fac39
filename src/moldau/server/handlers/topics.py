"""CreateTopics (19), DeleteTopics (20), CreatePartitions (37)."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import TYPE_CHECKING, Any

from moldau.config.topic import describe
from moldau.controller.admin import NewTopic
from moldau.protocol.apis import ApiKey
from moldau.protocol.codec import build_response
from moldau.protocol.errors import ErrorCode, KafkaError
from moldau.security.acl import AclOperation as Op
from moldau.security.acl import ResourceType as RT
from moldau.server import authorization as auth
from moldau.server.request import RequestContext, Response

if TYPE_CHECKING:
    from moldau.server.broker import Broker


# The first versions answered THROTTLING_QUOTA_EXCEEDED (KIP-599): a client over its
# controller_mutation_rate is refused there; older clients are only throttled.
STRICT_MUTATIONS = {ApiKey.CREATE_TOPICS: 6, ApiKey.DELETE_TOPICS: 5, ApiKey.CREATE_PARTITIONS: 3}


def _throttled(result: dict[str, Any]) -> dict[str, Any]:
    result["error_code"] = ErrorCode.throttling_quota_exceeded
    result["error_message"] = "The throttling quota has been exceeded."
    return result


def _ms(value: Any) -> int:
    return int(value.total_seconds() * 1000)


async def handle_create_topics(broker: Broker, ctx: RequestContext) -> Response:
    req = ctx.body()
    version = ctx.version
    timeout_ms = _ms(req.timeout)
    counts = Counter(t.name for t in req.topics)

    async def create(t: Any) -> dict[str, Any]:
        result: dict[str, Any] = {"name": t.name, "num_partitions": -1, "replication_factor": -1}
        if counts[t.name] > 1:
            result["error_code"] = ErrorCode.invalid_request
            result["error_message"] = (
                f"Create topics request contains multiple entries for {t.name}"
            )
            return result
        if not auth.may_create_topic(broker.authorizer, ctx, t.name):
            result["error_code"] = ErrorCode.topic_authorization_failed
            result["error_message"] = "Authorization failed."
            return result
        assignments = {a.partition_index: list(a.broker_ids) for a in t.assignments} or None
        configs = {c.name: c.value for c in t.configs}
        validate_only = bool(getattr(req, "validate_only", False))  # v1+
        partitions = len(assignments or ()) or t.num_partitions
        if partitions < 0:
            partitions = broker.config["num.partitions"]
        if not validate_only and not broker.quotas.record_mutation(
            ctx, partitions, strict=version >= STRICT_MUTATIONS[ApiKey.CREATE_TOPICS]
        ):
            return _throttled(result)
        try:
            assignment, error = await broker.admin_manager.create_topic(
                NewTopic(t.name, t.num_partitions, t.replication_factor, assignments, configs),
                timeout_ms,
                validate_only,
            )
        except KafkaError as e:
            result["error_code"] = e.code
            result["error_message"] = e.message or None
            return result
        result["error_code"] = error
        result["topic_id"] = assignment.topic_id
        result["num_partitions"] = len(assignment.partitions)
        result["replication_factor"] = len(next(iter(assignment.partitions.values())))
        if not auth.allows(broker.authorizer, ctx, Op.DESCRIBE_CONFIGS, RT.TOPIC, t.name):
            # Created, but its configs are not shown (Kafka's KafkaApis, v5+).
            result["topic_config_error_code"] = ErrorCode.topic_authorization_failed
            return result
        overrides = {k: v for k, v in configs.items() if v is not None}
        result["configs"] = [
            {
                "name": c.name,
                "value": c.value,
                "read_only": c.read_only,
                "config_source": int(c.source),
                "is_sensitive": False,
            }
            for c in describe(overrides, broker.config)
        ]
        return result

    results = await asyncio.gather(*(create(t) for t in req.topics))
    return build_response(ApiKey.CREATE_TOPICS, version, {"throttle_time": 0, "topics": results})


async def handle_delete_topics(broker: Broker, ctx: RequestContext) -> Response:
    req = ctx.body()
    version = ctx.version
    timeout_ms = _ms(req.timeout)
    if version >= 6:
        names = {v: k for k, v in broker.metadata_cache.topic_ids.items()}
        wanted = [(t.name or names.get(t.topic_id), t.topic_id) for t in req.topics]
    else:
        wanted = [(name, None) for name in req.topic_names]

    async def delete(name: str | None, topic_id: Any) -> dict[str, Any]:
        result: dict[str, Any] = {"name": name, "topic_id": topic_id}
        if name is None:
            result["error_code"] = ErrorCode.unknown_topic_id
            return result
        if not auth.allows(broker.authorizer, ctx, Op.DELETE, RT.TOPIC, name):
            result["error_code"] = ErrorCode.topic_authorization_failed
            return result
        if not broker.config["delete.topic.enable"]:
            result["error_code"] = ErrorCode.topic_deletion_disabled
            return result
        result["topic_id"] = topic_id or broker.metadata_cache.topic_ids.get(name)
        if not broker.quotas.record_mutation(
            ctx,
            broker.metadata_cache.partition_count(name),
            strict=version >= STRICT_MUTATIONS[ApiKey.DELETE_TOPICS],
        ):
            return _throttled(result)
        try:
            result["error_code"] = await broker.admin_manager.delete_topic(name, timeout_ms)
        except KafkaError as e:
            result["error_code"] = e.code
            result["error_message"] = e.message or None
        return result

    results = await asyncio.gather(*(delete(n, i) for n, i in wanted))
    return build_response(ApiKey.DELETE_TOPICS, version, {"throttle_time": 0, "responses": results})


async def handle_create_partitions(broker: Broker, ctx: RequestContext) -> Response:
    req = ctx.body()
    timeout_ms = _ms(req.timeout)
    counts = Counter(t.name for t in req.topics)

    async def create(t: Any) -> dict[str, Any]:
        result: dict[str, Any] = {"name": t.name}
        if counts[t.name] > 1:
            result["error_code"] = ErrorCode.invalid_request
            result["error_message"] = f"Duplicate topic in request: {t.name}"
            return result
        if not auth.allows(broker.authorizer, ctx, Op.ALTER, RT.TOPIC, t.name):
            result["error_code"] = ErrorCode.topic_authorization_failed
            result["error_message"] = "Authorization failed."
            return result
        assignments = None if t.assignments is None else [list(a.broker_ids) for a in t.assignments]
        added = max(t.count - broker.metadata_cache.partition_count(t.name), 0)
        if not req.validate_only and not broker.quotas.record_mutation(
            ctx, added, strict=ctx.version >= STRICT_MUTATIONS[ApiKey.CREATE_PARTITIONS]
        ):
            return _throttled(result)
        try:
            result["error_code"] = await broker.admin_manager.create_partitions(
                t.name, t.count, assignments, timeout_ms, bool(req.validate_only)
            )
        except KafkaError as e:
            result["error_code"] = e.code
            result["error_message"] = e.message or None
        return result

    results = await asyncio.gather(*(create(t) for t in req.topics))
    return build_response(
        ApiKey.CREATE_PARTITIONS, ctx.version, {"throttle_time": 0, "results": results}
    )
