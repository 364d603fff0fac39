"""Consumer group membership: JoinGroup (11), SyncGroup (14), Heartbeat (12),
LeaveGroup (13), DescribeGroups (15), ListGroups (16), DeleteGroups (42),
OffsetDelete (47)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from moldau.coordinator.group import GroupState
from moldau.coordinator.group_coordinator import JoinRequest
from moldau.protocol.apis import ApiKey
from moldau.protocol.codec import build_response
from moldau.protocol.errors import ErrorCode
from moldau.security.acl import AclOperation as Op
from moldau.security.acl import ResourceType as RT
from moldau.server import authorization as auth
from moldau.server import authorized_operations as ops
from moldau.server.authorized_operations import authorized
from moldau.server.request import RequestContext, Response
from moldau.storage.partition_name import TopicPartition

if TYPE_CHECKING:
    from moldau.server.broker import Broker


def _ms(value: Any) -> int:
    return int(value.total_seconds() * 1000)


async def handle_join_group(broker: Broker, ctx: RequestContext) -> Response:
    req = ctx.body()
    auth.require_group(broker.authorizer, ctx, Op.READ, req.group_id)
    version = ctx.version
    session_ms = _ms(req.session_timeout)
    result = await broker.group_coordinator.join_group(
        JoinRequest(
            req.group_id,
            req.member_id,
            getattr(req, "group_instance_id", None),
            ctx.header.client_id or "",
            f"/{ctx.client.host}",
            _ms(req.rebalance_timeout) if version >= 1 else session_ms,
            session_ms,
            req.protocol_type,
            [(p.name, bytes(p.metadata)) for p in req.protocols],
            require_known_member_id=version >= 4,
            supports_skip_assignment=version >= 9,
        )
    )
    return build_response(
        ApiKey.JOIN_GROUP,
        version,
        {
            "throttle_time": 0,
            "error_code": result.error,
            "generation_id": result.generation_id,
            "protocol_type": result.protocol_type,
            "protocol_name": result.protocol_name or ("" if version < 7 else None),
            "leader": result.leader_id,
            "skip_assignment": result.skip_assignment,
            "member_id": result.member_id,
            "members": [
                {"member_id": m, "group_instance_id": i, "metadata": meta}
                for m, i, meta in result.members
            ],
        },
    )


async def handle_sync_group(broker: Broker, ctx: RequestContext) -> Response:
    req = ctx.body()
    auth.require_group(broker.authorizer, ctx, Op.READ, req.group_id)
    result = await broker.group_coordinator.sync_group(
        req.group_id,
        req.generation_id,
        req.member_id,
        getattr(req, "group_instance_id", None),
        getattr(req, "protocol_type", None),
        getattr(req, "protocol_name", None),
        {a.member_id: bytes(a.assignment) for a in req.assignments},
    )
    return build_response(
        ApiKey.SYNC_GROUP,
        ctx.version,
        {
            "throttle_time": 0,
            "error_code": result.error,
            "protocol_type": result.protocol_type,
            "protocol_name": result.protocol_name,
            "assignment": result.assignment,
        },
    )


async def handle_heartbeat(broker: Broker, ctx: RequestContext) -> Response:
    req = ctx.body()
    auth.require_group(broker.authorizer, ctx, Op.READ, req.group_id)
    error = broker.group_coordinator.heartbeat(
        req.group_id, req.member_id, getattr(req, "group_instance_id", None), req.generation_id
    )
    return build_response(ApiKey.HEARTBEAT, ctx.version, {"throttle_time": 0, "error_code": error})


async def handle_leave_group(broker: Broker, ctx: RequestContext) -> Response:
    req = ctx.body()
    auth.require_group(broker.authorizer, ctx, Op.READ, req.group_id)
    version = ctx.version
    if version >= 3:
        members = [(m.member_id, m.group_instance_id) for m in req.members]
    else:
        members = [(req.member_id, None)]
    error, results = broker.group_coordinator.leave_group(req.group_id, members)
    if version < 3 and error == ErrorCode.none and results:
        error = results[0]
    return build_response(
        ApiKey.LEAVE_GROUP,
        version,
        {
            "throttle_time": 0,
            "error_code": error,
            "members": [
                {"member_id": m, "group_instance_id": i, "error_code": e}
                for (m, i), e in zip(members, results, strict=False)
            ],
        },
    )


async def handle_describe_groups(broker: Broker, ctx: RequestContext) -> Response:
    req = ctx.body()
    groups = []
    authorizer = broker.authorizer
    for group_id in req.groups:
        if not auth.allows(authorizer, ctx, Op.DESCRIBE, RT.GROUP, group_id):
            groups.append(
                {
                    "error_code": ErrorCode.group_authorization_failed,
                    "group_id": group_id,
                    "group_state": "",
                    "protocol_type": "",
                    "protocol_data": "",
                    "members": [],
                    "authorized_operations": -(2**31),
                }
            )
            continue
        error, group = broker.group_coordinator.describe_group(group_id)
        described: dict[str, Any] = {
            "error_code": error,
            "group_id": group_id,
            "group_state": GroupState.DEAD.value,
            "protocol_type": "",
            "protocol_data": "",
            "members": [],
            "authorized_operations": -(2**31),
        }
        if error == ErrorCode.none:  # a group that does not exist too (DEAD), as Kafka
            described["authorized_operations"] = authorized(
                auth.authorized_operations(authorizer, ctx, RT.GROUP, group_id, ops.GROUP),
                bool(getattr(req, "include_authorized_operations", False)),  # v3+
            )
        if error == ErrorCode.none and group is not None:
            stable = group.state == GroupState.STABLE
            protocol = group.protocol_name if stable else None
            described.update(
                group_state=group.state.value,
                protocol_type=group.protocol_type or "",
                protocol_data=protocol or "",
                members=[
                    {
                        "member_id": m.member_id,
                        "group_instance_id": m.group_instance_id,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "member_metadata": m.metadata_for(protocol) if protocol else b"",
                        "member_assignment": m.assignment if stable else b"",
                    }
                    for m in group.members.values()
                ],
            )
        groups.append(described)
    return build_response(
        ApiKey.DESCRIBE_GROUPS, ctx.version, {"throttle_time": 0, "groups": groups}
    )


async def handle_list_groups(broker: Broker, ctx: RequestContext) -> Response:
    req = ctx.body()
    states = {s.lower() for s in getattr(req, "states_filter", ())}  # v4+
    # v5+; every group here is classic, so a filter without "classic" lists none
    # (Kafka 4's admin client asks for "consumer" and "classic" groups).
    types = {t.lower() for t in getattr(req, "types_filter", ())}
    error, groups = broker.group_coordinator.list_groups()
    if types and "classic" not in types:
        groups = []
    authorizer = broker.authorizer
    if authorizer is not None and not auth.allows_cluster(authorizer, ctx, Op.DESCRIBE):
        # Without DESCRIBE on the cluster, the groups the principal may describe.
        groups = [
            g for g in groups if auth.allows(authorizer, ctx, Op.DESCRIBE, RT.GROUP, g.group_id)
        ]
    listed = [
        {
            "group_id": g.group_id,
            "protocol_type": g.protocol_type or "",
            "group_state": g.state.value,
            "group_type": "classic",
        }
        for g in groups
        if not states or g.state.value.lower() in states
    ]
    return build_response(
        ApiKey.LIST_GROUPS, ctx.version, {"throttle_time": 0, "error_code": error, "groups": listed}
    )


async def handle_delete_groups(broker: Broker, ctx: RequestContext) -> Response:
    req = ctx.body()
    deletable = auth.filter_authorized(
        broker.authorizer, ctx, Op.DELETE, RT.GROUP, req.groups_names
    )
    results = await broker.group_coordinator.delete_groups(
        [g for g in req.groups_names if g in deletable]
    )
    for g in req.groups_names:
        if g not in deletable:
            results[g] = ErrorCode.group_authorization_failed
    return build_response(
        ApiKey.DELETE_GROUPS,
        ctx.version,
        {
            "throttle_time": 0,
            "results": [{"group_id": g, "error_code": results[g]} for g in req.groups_names],
        },
    )


async def handle_offset_delete(broker: Broker, ctx: RequestContext) -> Response:
    req = ctx.body()
    authorizer = broker.authorizer
    auth.require_group(authorizer, ctx, Op.DELETE, req.group_id)
    readable = auth.filter_authorized(
        authorizer, ctx, Op.READ, RT.TOPIC, (t.name for t in req.topics)
    )
    cache = broker.metadata_cache
    # As Kafka's KafkaApis: a partition the cluster does not have is answered
    # UNKNOWN_TOPIC_OR_PARTITION and never reaches the coordinator.
    unknown = {
        tp: ErrorCode.unknown_topic_or_partition
        for t in req.topics
        for p in t.partitions
        if cache.partition_state(tp := TopicPartition(t.name, p.partition_index)) is None
    }
    for t in req.topics:
        if t.name not in readable:
            for p in t.partitions:
                unknown[TopicPartition(t.name, p.partition_index)] = (
                    ErrorCode.topic_authorization_failed
                )
    wanted = [
        tp
        for t in req.topics
        for p in t.partitions
        if (tp := TopicPartition(t.name, p.partition_index)) not in unknown
    ]
    error, results = await broker.group_coordinator.delete_offsets(req.group_id, wanted)
    results.update(unknown)
    topics = [
        {
            "name": t.name,
            "partitions": [
                {
                    "partition_index": p.partition_index,
                    "error_code": results.get(
                        TopicPartition(t.name, p.partition_index), ErrorCode.none
                    ),
                }
                for p in t.partitions
            ],
        }
        for t in req.topics
    ]
    return build_response(
        ApiKey.OFFSET_DELETE,
        ctx.version,
        {
            "throttle_time": 0,
            "error_code": error,
            "topics": topics if error == ErrorCode.none else [],
        },
    )
