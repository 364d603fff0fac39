"""Metadata (3) and DescribeCluster (60), answered from the metadata cache.

Metadata may create unknown topics (auto.create.topics.enable) and then answers
LEADER_NOT_AVAILABLE for them, as Kafka does; the client asks again. Encoded
responses are cached until the metadata changes: kio's encoder is slow and
clients ask often."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from moldau.controller.admin import INTERNAL_TOPICS, NewTopic, validate_topic_name
from moldau.protocol.apis import ApiKey
from moldau.protocol.codec import build_response, encode_body
from moldau.protocol.errors import (
    ErrorCode,
    InvalidRequestError,
    KafkaError,
    TopicAlreadyExistsError,
)
from moldau.security.acl import CLUSTER_NAME
from moldau.security.acl import AclOperation as Op
from moldau.security.acl import ResourceType as RT
from moldau.server import authorization as auth
from moldau.server import authorized_operations as ops
from moldau.server.authorized_operations import authorized
from moldau.server.request import RawBody, RequestContext, Response

if TYPE_CHECKING:
    from moldau.server.broker import Broker

_CACHE_LIMIT = 256
_ZERO_UUID = uuid.UUID(int=0)


async def handle_metadata(broker: Broker, ctx: RequestContext) -> Response:
    req = ctx.body()
    version = ctx.version
    cache = broker.metadata_cache
    unknown_ids: list[uuid.UUID] = []
    if req.topics is None or (version == 0 and not req.topics):
        requested: list[str] | None = None
    else:
        ids = _topic_ids(req.topics, version)
        if ids:
            # As Kafka: any topic id means a lookup by id (the Java client leaves the
            # name "" there); ids no topic has are answered UNKNOWN_TOPIC_ID.
            by_id = {v: k for k, v in cache.topic_ids.items()}
            requested = [by_id[i] for i in ids if i in by_id]
            unknown_ids = [i for i in ids if i not in by_id]
        else:
            requested = [t.name for t in req.topics if t.name is not None]
    allow_auto = True if version < 4 else bool(req.allow_auto_topic_creation)
    topic_ops = bool(getattr(req, "include_topic_authorized_operations", False))  # v8+
    cluster_ops = bool(getattr(req, "include_cluster_authorized_operations", False))  # v8-10
    key = (
        cache.version,
        version,
        None if requested is None else tuple(requested),
        ctx.client.listener,
        topic_ops,
        cluster_ops,
    )
    authorizer = broker.authorizer
    # Answers differ per principal with an authorizer: none are cached then.
    cached = None if unknown_ids or authorizer else broker.metadata_responses.get(key)
    if cached is not None:
        return RawBody([cached])
    topics: list[dict[str, Any]] = [
        {"error_code": ErrorCode.unknown_topic_id, "name": None, "topic_id": i} for i in unknown_ids
    ]
    cacheable = not unknown_ids and authorizer is None
    names = cache.topics() if requested is None else list(dict.fromkeys(requested))
    visible = (
        None
        if authorizer is None
        else auth.filter_authorized(authorizer, ctx, Op.DESCRIBE, RT.TOPIC, names)
    )
    for name in names:
        if visible is not None and name not in visible:
            # All topics: the ones the principal may not describe are left out; named
            # ones are refused, whether they exist or not (Kafka's KafkaApis).
            if requested is not None:
                topics.append({"error_code": ErrorCode.topic_authorization_failed,
                               "name": name, "is_internal": name in INTERNAL_TOPICS})  # fmt: skip
            continue
        if cache.contains_topic(name):
            bits = ops.TOPIC
            if authorizer is not None and topic_ops:
                bits = auth.authorized_operations(authorizer, ctx, RT.TOPIC, name, ops.TOPIC)
            topics.append(_topic(broker, name, version, authorized(bits, topic_ops)))
            continue
        cacheable = False
        auto = allow_auto and broker.config["auto.create.topics.enable"]
        if auto and authorizer and not auth.may_create_topic(authorizer, ctx, name):
            error = ErrorCode.topic_authorization_failed
        else:
            error = await _unknown_topic(broker, name, allow_auto)
        topics.append({"error_code": error, "name": name, "is_internal": name in INTERNAL_TOPICS})
    brokers = []
    for b in sorted(cache.brokers.values(), key=lambda b: b.id):
        for ep in b.endpoints:
            if ep.listener == ctx.client.listener:
                brokers.append({"node_id": b.id, "host": ep.host, "port": ep.port, "rack": b.rack})
    body = encode_body(
        build_response(
            ApiKey.METADATA,
            version,
            {
                "throttle_time": 0,
                "brokers": brokers,
                "cluster_id": broker.cluster_id,
                "controller_id": cache.controller_id if cache.controller_id is not None else -1,
                "topics": topics,
                "cluster_authorized_operations": authorized(
                    auth.authorized_operations(
                        authorizer, ctx, RT.CLUSTER, CLUSTER_NAME, ops.CLUSTER
                    ),
                    cluster_ops,
                ),
            },
        )
    )
    if cacheable:
        if len(broker.metadata_responses) >= _CACHE_LIMIT or any(
            k[0] != cache.version for k in broker.metadata_responses
        ):
            broker.metadata_responses.clear()
        broker.metadata_responses[key] = body
    return RawBody([body])


def _topic_ids(topics: Any, version: int) -> list[uuid.UUID]:
    """The topic ids a Metadata request names (v12 and later), zero ids left out."""
    if version < 10:
        return []
    ids = [t.topic_id for t in topics if t.topic_id is not None and t.topic_id != _ZERO_UUID]
    if ids and version < 12:
        raise InvalidRequestError(f"Topic IDs are not supported in requests for version {version}")
    return list(dict.fromkeys(ids))


async def handle_metadata_while_starting(broker: Broker, ctx: RequestContext) -> Response:
    """While the broker starts (its logs loading): itself as the only broker and as
    the controller, and no leader yet for any topic asked for (LEADER_NOT_AVAILABLE,
    which clients retry soon); nothing is created. Admin clients send their requests
    to the controller named here, and wait for one while none is (librdkafka until
    its next periodic refresh, minutes): this broker takes them (held until it has
    started), as any broker takes them in KRaft-era Kafka, which names a random live
    broker as the controller."""
    req = ctx.body()
    ids = [] if req.topics is None else _topic_ids(req.topics, ctx.version)
    names = [] if req.topics is None or ids else [t.name for t in req.topics if t.name is not None]
    brokers = [
        {"node_id": broker.broker_id, "host": ep.host, "port": ep.port, "rack": broker.config.rack}
        for ep in broker.advertised_endpoints()
        if ep.listener == ctx.client.listener
    ]
    topics = [
        {
            "error_code": ErrorCode.leader_not_available,
            "name": name,
            "is_internal": name in INTERNAL_TOPICS,
        }
        for name in dict.fromkeys(names)
    ] + [{"error_code": ErrorCode.leader_not_available, "name": None, "topic_id": i} for i in ids]
    return build_response(
        ApiKey.METADATA,
        ctx.version,
        {
            "throttle_time": 0,
            "brokers": brokers,
            "cluster_id": broker.cluster_id,
            "controller_id": broker.broker_id,
            "topics": topics,
            "cluster_authorized_operations": -(2**31),
        },
    )


def _topic(broker: Broker, name: str, version: int, operations: int) -> dict[str, Any]:
    cache = broker.metadata_cache
    partitions = []
    for p, s in sorted(cache.partitions[name].items()):
        live = set(cache.brokers)
        error = ErrorCode.none
        leader = s.leader
        replicas = list(s.replicas)
        isr = list(s.isr)
        if leader not in live:
            error = ErrorCode.leader_not_available
            leader = -1
        elif version == 0 and (set(replicas) - live or set(isr) - live):
            error = ErrorCode.replica_not_available
            replicas = [r for r in replicas if r in live]
            isr = [r for r in isr if r in live]
        partitions.append(
            {
                "error_code": error,
                "partition_index": p,
                "leader_id": leader,
                "leader_epoch": s.leader_epoch,
                "replica_nodes": replicas,
                "isr_nodes": isr,
                "offline_replicas": list(s.offline_replicas),
            }
        )
    return {
        "error_code": ErrorCode.none,
        "name": name,
        "topic_id": cache.topic_ids.get(name),
        "is_internal": name in INTERNAL_TOPICS,
        "partitions": partitions,
        "topic_authorized_operations": operations,
    }


async def _unknown_topic(broker: Broker, name: str, allow_auto: bool) -> ErrorCode:
    try:
        validate_topic_name(name)
    except KafkaError:
        return ErrorCode.invalid_topic_exception
    if not (allow_auto and broker.config["auto.create.topics.enable"]) or name in INTERNAL_TOPICS:
        return ErrorCode.unknown_topic_or_partition
    try:
        await broker.admin_manager.create_topic(NewTopic(name), timeout_ms=0)
    except TopicAlreadyExistsError:
        pass  # created meanwhile (by another client or broker): leaders are on their way
    except KafkaError as e:
        return e.code
    return ErrorCode.leader_not_available


async def handle_describe_cluster(broker: Broker, ctx: RequestContext) -> Response:
    req = ctx.body()
    cache = broker.metadata_cache
    if ctx.version >= 1 and req.endpoint_type not in (1,):
        return build_response(
            ApiKey.DESCRIBE_CLUSTER,
            ctx.version,
            {
                "error_code": ErrorCode.unsupported_endpoint_type,
                "error_message": "only broker endpoints are served",
                "endpoint_type": req.endpoint_type,
                "cluster_id": broker.cluster_id,
                "controller_id": -1,
                "brokers": [],
            },
        )
    brokers = []
    for b in sorted(cache.brokers.values(), key=lambda b: b.id):
        for ep in b.endpoints:
            if ep.listener == ctx.client.listener:
                brokers.append(
                    {"broker_id": b.id, "host": ep.host, "port": ep.port, "rack": b.rack}
                )
    return build_response(
        ApiKey.DESCRIBE_CLUSTER,
        ctx.version,
        {
            "throttle_time": 0,
            "error_code": ErrorCode.none,
            "endpoint_type": 1,
            "cluster_id": broker.cluster_id,
            "controller_id": cache.controller_id if cache.controller_id is not None else -1,
            "brokers": brokers,
            "cluster_authorized_operations": authorized(
                auth.authorized_operations(
                    broker.authorizer, ctx, RT.CLUSTER, CLUSTER_NAME, ops.CLUSTER
                ),
                bool(req.include_cluster_authorized_operations),
            ),
        },
    )
