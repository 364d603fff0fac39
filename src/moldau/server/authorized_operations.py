"""What a client may do with a resource, as the authorized-operations fields of
Metadata, DescribeCluster and DescribeGroups carry it (KIP-430): a bit per ACL
operation. Moldau has no authorizer, so everything a resource supports is allowed,
as Kafka answers without one; a client that did not ask gets Kafka's "not asked"
value."""

from __future__ import annotations

from enum import IntEnum

NOT_ASKED = -(2**31)


class AclOperation(IntEnum):
    """Kafka's org.apache.kafka.common.acl.AclOperation codes."""

    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


def _bits(*ops: AclOperation) -> int:
    return sum(1 << op for op in ops)


_Op = AclOperation
# Kafka's AclEntry.supportedOperations, per resource type
TOPIC = _bits(_Op.READ, _Op.WRITE, _Op.CREATE, _Op.DESCRIBE, _Op.DELETE, _Op.ALTER,
              _Op.DESCRIBE_CONFIGS, _Op.ALTER_CONFIGS)  # fmt: skip
GROUP = _bits(_Op.READ, _Op.DESCRIBE, _Op.DELETE, _Op.DESCRIBE_CONFIGS, _Op.ALTER_CONFIGS)
CLUSTER = _bits(_Op.CREATE, _Op.CLUSTER_ACTION, _Op.DESCRIBE_CONFIGS, _Op.ALTER_CONFIGS,
                _Op.IDEMPOTENT_WRITE, _Op.ALTER, _Op.DESCRIBE)  # fmt: skip


def authorized(operations: int, asked: bool) -> int:
    return operations if asked else NOT_ASKED
