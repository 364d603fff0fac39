"""What a client may do with a resource, as the authorized-operations fields of
Metadata, DescribeCluster and DescribeGroups carry it (KIP-430): a bit per ACL
operation. Without an authorizer everything a resource supports is allowed, as
Kafka answers without one (with one, server/authorization.py asks the ACLs); a
client that did not ask gets Kafka's "not asked" value."""

from __future__ import annotations

from moldau.security.acl import AclOperation

NOT_ASKED = -(2**31)


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
