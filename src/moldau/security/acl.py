"""Kafka's ACL model (org.apache.kafka.common.acl / resource): what an ACL says and
which resources, principals and hosts it covers. Pure data and functions: the
authorizer decides with them, the ACL APIs filter with them, storage encodes them.

Codes are Kafka's wire codes; names are the ones its JSON and tools print."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

WILDCARD = "*"  # a resource name, principal ("User:*") or host matching all
WILDCARD_PRINCIPAL = "User:*"


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters: any pattern type, names compared literally
    MATCH = 2  # filters: every pattern that would cover the named resource
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    ALL = 2
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
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    DENY = 2
    ALLOW = 3


# The resource name of the one cluster resource.
CLUSTER_NAME = "kafka-cluster"

# Kafka's names in ZooKeeper paths and JSON: Topic, Group, Cluster, TransactionalId...
RESOURCE_NAMES: dict[ResourceType, str] = {
    ResourceType.TOPIC: "Topic",
    ResourceType.GROUP: "Group",
    ResourceType.CLUSTER: "Cluster",
    ResourceType.TRANSACTIONAL_ID: "TransactionalId",
    ResourceType.DELEGATION_TOKEN: "DelegationToken",
    ResourceType.USER: "User",
}
RESOURCE_BY_NAME = {v: k for k, v in RESOURCE_NAMES.items()}

# Operations an ALLOW on the key also grants (Kafka's AclAuthorizer: DESCRIBE is
# implied by READ/WRITE/DELETE/ALTER, DESCRIBE_CONFIGS by ALTER_CONFIGS).
IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset(
        {
            AclOperation.DESCRIBE,
            AclOperation.READ,
            AclOperation.WRITE,
            AclOperation.DELETE,
            AclOperation.ALTER,
        }
    ),
    AclOperation.DESCRIBE_CONFIGS: frozenset(
        {AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}
    ),
}

_O = AclOperation
# Kafka's AclEntry.supportedOperations: what an ACL on each resource type may name
# (besides ALL), and what the authorized-operations fields enumerate.
SUPPORTED_OPERATIONS: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset({_O.READ, _O.WRITE, _O.CREATE, _O.DESCRIBE, _O.DELETE,
                                   _O.ALTER, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS}),
    ResourceType.GROUP: frozenset({_O.READ, _O.DESCRIBE, _O.DELETE}),
    ResourceType.CLUSTER: frozenset({_O.CREATE, _O.CLUSTER_ACTION, _O.DESCRIBE_CONFIGS,
                                     _O.ALTER_CONFIGS, _O.IDEMPOTENT_WRITE, _O.ALTER,
                                     _O.DESCRIBE}),
    ResourceType.TRANSACTIONAL_ID: frozenset({_O.DESCRIBE, _O.WRITE}),
    ResourceType.DELEGATION_TOKEN: frozenset({_O.DESCRIBE}),
    ResourceType.USER: frozenset({_O.CREATE_TOKENS, _O.DESCRIBE_TOKENS}),
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType  # LITERAL or PREFIXED

    def covers(self, resource_type: ResourceType, name: str) -> bool:
        """Whether an ACL on this pattern applies to the named resource."""
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == PatternType.PREFIXED:
            return name.startswith(self.name)
        return self.name in (name, WILDCARD)


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    principal: str  # "User:alice", "User:*"
    host: str  # an address or "*"
    operation: AclOperation
    permission: AclPermissionType

    def applies_to(self, principal: str, host: str) -> bool:
        return (self.principal in (principal, WILDCARD_PRINCIPAL)) and (
            self.host in (host, WILDCARD)
        )


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry


@dataclass(frozen=True, slots=True)
class ResourcePatternFilter:
    resource_type: ResourceType  # ANY matches all
    name: str | None  # None matches all
    pattern_type: PatternType  # ANY, MATCH, LITERAL or PREFIXED

    def matches(self, p: ResourcePattern) -> bool:
        if self.resource_type not in (ResourceType.ANY, p.resource_type):
            return False
        if self.pattern_type == PatternType.MATCH:
            # Every pattern that covers the named resource (and the name itself).
            if self.name is None:
                return True
            return p.covers(p.resource_type, self.name)
        if self.pattern_type not in (PatternType.ANY, p.pattern_type):
            return False
        return self.name is None or self.name == p.name


@dataclass(frozen=True, slots=True)
class AccessControlEntryFilter:
    principal: str | None
    host: str | None
    operation: AclOperation  # ANY matches all
    permission: AclPermissionType  # ANY matches all

    def matches(self, e: AccessControlEntry) -> bool:
        return (
            (self.principal is None or self.principal == e.principal)
            and (self.host is None or self.host == e.host)
            and self.operation in (AclOperation.ANY, e.operation)
            and self.permission in (AclPermissionType.ANY, e.permission)
        )


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    pattern: ResourcePatternFilter
    entry: AccessControlEntryFilter

    def matches(self, b: AclBinding) -> bool:
        return self.pattern.matches(b.pattern) and self.entry.matches(b.entry)


def binding_error(b: AclBinding) -> str | None:
    """Why Kafka would refuse to create this binding (None: it may be created)."""
    p, e = b.pattern, b.entry
    if p.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
        return "Resource type must be concrete"
    if p.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return "Resource pattern type must be LITERAL or PREFIXED"
    if not p.name:
        return "Resource name must not be empty"
    if p.resource_type == ResourceType.CLUSTER and p.name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if e.operation in (AclOperation.ANY, AclOperation.UNKNOWN):
        return "Operation must be concrete"
    if e.permission in (AclPermissionType.ANY, AclPermissionType.UNKNOWN):
        return "Permission type must be ALLOW or DENY"
    if e.operation != AclOperation.ALL and e.operation not in SUPPORTED_OPERATIONS.get(
        p.resource_type, frozenset()
    ):
        return f"{e.operation.name} is not a valid operation for {p.resource_type.name}"
    if ":" not in e.principal:
        return f"Could not parse principal {e.principal!r}"
    return None


# -- Kafka's ZooKeeper JSON ({"version":1,"acls":[...]}) ------------------------------


def _camel(name: str) -> str:
    return "".join(w.capitalize() for w in name.split("_"))


OPERATION_NAMES: dict[AclOperation, str] = {op: _camel(op.name) for op in AclOperation}
OPERATION_BY_NAME = {v.lower(): k for k, v in OPERATION_NAMES.items()}
PERMISSION_NAMES = {AclPermissionType.ALLOW: "Allow", AclPermissionType.DENY: "Deny"}
PERMISSION_BY_NAME = {v.lower(): k for k, v in PERMISSION_NAMES.items()}


def entry_to_json(e: AccessControlEntry) -> dict[str, str]:
    return {
        "principal": e.principal,
        "permissionType": PERMISSION_NAMES[e.permission],
        "operation": OPERATION_NAMES[e.operation],
        "host": e.host,
    }


def entry_from_json(d: dict[str, str]) -> AccessControlEntry:
    return AccessControlEntry(
        principal=d["principal"],
        host=d["host"],
        operation=OPERATION_BY_NAME[d["operation"].lower()],
        permission=PERMISSION_BY_NAME[d["permissionType"].lower()],
    )
