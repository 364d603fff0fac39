"""The authorization checks of the request handlers (what Kafka's KafkaApis asks of
its AuthHelper), in one place so that each handler's needs are visible here.

Every helper takes the broker's authorizer, which is None when authorizer.class.name
is empty: then everything is allowed, at the cost of one `is None` test.

- `require_*` raise the Kafka error of a refused request-level check.
- `allows`/`filter_authorized` answer per resource, for handlers that refuse some
  topics or groups of a request and serve the others.
- API_CLUSTER_CHECKS: the APIs that need one cluster operation before anything else
  (inter-broker APIs need CLUSTER_ACTION); checked by the dispatcher.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from moldau.protocol.apis import ApiKey
from moldau.protocol.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)
from moldau.security.acl import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from moldau.security.authorizer import Authorizer
    from moldau.server.request import RequestContext

Op = AclOperation
RT = ResourceType

# Whole-request cluster checks, as KafkaApis makes them, for APIs whose every version
# has a top-level error code to say so (the others, and per-resource checks, are in
# their handlers).
API_CLUSTER_CHECKS: dict[ApiKey, AclOperation] = {
    ApiKey.LEADER_AND_ISR: Op.CLUSTER_ACTION,
    ApiKey.STOP_REPLICA: Op.CLUSTER_ACTION,
    ApiKey.UPDATE_METADATA: Op.CLUSTER_ACTION,
    ApiKey.CONTROLLED_SHUTDOWN: Op.CLUSTER_ACTION,
    ApiKey.ALTER_PARTITION: Op.CLUSTER_ACTION,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: Op.ALTER,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: Op.DESCRIBE,
}


def allows(
    authorizer: Authorizer | None,
    ctx: RequestContext,
    operation: AclOperation,
    resource_type: ResourceType,
    name: str,
) -> bool:
    if authorizer is None:
        return True
    s = ctx.session
    return authorizer.authorize(s.principal, s.host, operation, resource_type, name)


def allows_cluster(
    authorizer: Authorizer | None, ctx: RequestContext, operation: AclOperation
) -> bool:
    return allows(authorizer, ctx, operation, RT.CLUSTER, CLUSTER_NAME)


def filter_authorized(
    authorizer: Authorizer | None,
    ctx: RequestContext,
    operation: AclOperation,
    resource_type: ResourceType,
    names: Iterable[str],
) -> set[str]:
    """The names (deduplicated) the principal may do `operation` on."""
    unique = set(names)
    if authorizer is None:
        return unique
    return {n for n in unique if allows(authorizer, ctx, operation, resource_type, n)}


def require_cluster(
    authorizer: Authorizer | None, ctx: RequestContext, operation: AclOperation
) -> None:
    if not allows_cluster(authorizer, ctx, operation):
        raise ClusterAuthorizationFailedError(
            f"{ctx.principal} may not {operation.name} the cluster"
        )


def require_group(
    authorizer: Authorizer | None, ctx: RequestContext, operation: AclOperation, group: str
) -> None:
    if not allows(authorizer, ctx, operation, RT.GROUP, group):
        raise GroupAuthorizationFailedError(f"{ctx.principal} may not {operation.name} {group}")


def require_topic(
    authorizer: Authorizer | None, ctx: RequestContext, operation: AclOperation, topic: str
) -> None:
    if not allows(authorizer, ctx, operation, RT.TOPIC, topic):
        raise TopicAuthorizationFailedError(f"{ctx.principal} may not {operation.name} {topic}")


def require_transactional_id(
    authorizer: Authorizer | None,
    ctx: RequestContext,
    operation: AclOperation,
    transactional_id: str,
) -> None:
    if not allows(authorizer, ctx, operation, RT.TRANSACTIONAL_ID, transactional_id):
        raise TransactionalIdAuthorizationFailedError(
            f"{ctx.principal} may not {operation.name} {transactional_id}"
        )


def may_create_topic(authorizer: Authorizer | None, ctx: RequestContext, topic: str) -> bool:
    """CREATE on the cluster or on the topic (auto-creation, CreateTopics)."""
    return allows_cluster(authorizer, ctx, Op.CREATE) or allows(
        authorizer, ctx, Op.CREATE, RT.TOPIC, topic
    )


def may_write_txn_markers(authorizer: Authorizer | None, ctx: RequestContext) -> bool:
    """ALTER or CLUSTER_ACTION on the cluster (Kafka's WriteTxnMarkers)."""
    return allows_cluster(authorizer, ctx, Op.ALTER) or allows_cluster(
        authorizer, ctx, Op.CLUSTER_ACTION
    )


def may_write_idempotently(authorizer: Authorizer | None, ctx: RequestContext) -> bool:
    """InitProducerId without a transactional id: IDEMPOTENT_WRITE on the cluster, or
    WRITE on any topic (KIP-679)."""
    if authorizer is None or allows_cluster(authorizer, ctx, Op.IDEMPOTENT_WRITE):
        return True
    s = ctx.session
    return authorizer.authorize_any(s.principal, s.host, Op.WRITE, RT.TOPIC)


def authorized_operations(
    authorizer: Authorizer | None,
    ctx: RequestContext,
    resource_type: ResourceType,
    name: str,
    everything: int,
) -> int:
    """KIP-430's bit set: `everything` a resource type supports without an authorizer,
    else the operations the principal may do."""
    if authorizer is None:
        return everything
    if resource_type == RT.CLUSTER and not allows_cluster(authorizer, ctx, Op.DESCRIBE):
        return 0  # Kafka tells a principal that may not describe the cluster nothing
    s = ctx.session
    bits = 0
    for op in AclOperation:
        if everything & (1 << op) and authorizer.authorize(
            s.principal, s.host, op, resource_type, name
        ):
            bits |= 1 << op
    return bits


# DescribeConfigs/AlterConfigs resource types (Kafka's ConfigResource.Type codes).
_CONFIG_TOPIC, _CONFIG_BROKER, _CONFIG_BROKER_LOGGER = 2, 4, 8


def require_config_access(
    authorizer: Authorizer | None,
    ctx: RequestContext,
    config_resource_type: int,
    name: str,
    alter: bool,
) -> None:
    """DESCRIBE_CONFIGS (or ALTER_CONFIGS) on the topic, or on the cluster for a
    broker's configs."""
    if authorizer is None:
        return
    op = Op.ALTER_CONFIGS if alter else Op.DESCRIBE_CONFIGS
    if config_resource_type == _CONFIG_TOPIC:
        require_topic(authorizer, ctx, op, name)
    elif config_resource_type in (_CONFIG_BROKER, _CONFIG_BROKER_LOGGER):
        require_cluster(authorizer, ctx, op)
