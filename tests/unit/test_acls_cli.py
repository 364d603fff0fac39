"""`moldau acls`' flags become the ACLs kafka-acls.sh would make, and its text is
Kafka's."""

from __future__ import annotations

import pytest

from moldau.cli.acls import adding_text, current_text, resource_to_entries
from moldau.cli.errors import CliError
from moldau.cli.main import build_parser
from moldau.security.acl import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

Op = AclOperation


def parsed(*args: str) -> dict[tuple[ResourceType, str, PatternType], set[tuple[str, str, str]]]:
    ns = build_parser().parse_args(["acls", "--bootstrap-server", "x:1", *args])
    return {
        r: {(e.principal, e.host, f"{e.permission.name} {e.operation.name}") for e in acl}
        for r, acl in resource_to_entries(ns).items()
    }


def test_principals_hosts_and_operations_multiply() -> None:
    got = parsed("--add", "--allow-principal", "User:a", "--allow-principal", "User:b",
                 "--allow-host", "1.1.1.1", "--deny-principal", "User:c", "--operation", "read",
                 "--operation", "DescribeConfigs", "--topic", "t")  # fmt: skip
    assert got == {
        (ResourceType.TOPIC, "t", PatternType.LITERAL): {
            ("User:a", "1.1.1.1", "ALLOW READ"), ("User:a", "1.1.1.1", "ALLOW DESCRIBE_CONFIGS"),
            ("User:b", "1.1.1.1", "ALLOW READ"), ("User:b", "1.1.1.1", "ALLOW DESCRIBE_CONFIGS"),
            ("User:c", "*", "DENY READ"), ("User:c", "*", "DENY DESCRIBE_CONFIGS"),
        }
    }  # fmt: skip


def test_producer_consumer_and_idempotent_stand_for_kafkas_sets() -> None:
    got = parsed("--add", "--allow-principal", "User:p", "--producer", "--consumer",
                 "--idempotent", "--topic", "t", "--group", "g",
                 "--transactional-id", "x")  # fmt: skip
    ops = {r[0]: {e[2] for e in acl} for r, acl in got.items()}
    assert ops == {
        ResourceType.TOPIC: {"ALLOW WRITE", "ALLOW DESCRIBE", "ALLOW CREATE", "ALLOW READ"},
        ResourceType.GROUP: {"ALLOW READ"},
        ResourceType.TRANSACTIONAL_ID: {"ALLOW WRITE", "ALLOW DESCRIBE"},
        ResourceType.CLUSTER: {"ALLOW IDEMPOTENT_WRITE"},
    }
    assert (ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL) in got


def test_mistakes_are_one_line() -> None:
    with pytest.raises(CliError, match="at least one resource"):
        parsed("--add", "--allow-principal", "User:a", "--operation", "Read")
    with pytest.raises(CliError, match="only supports operations"):
        parsed("--add", "--allow-principal", "User:a", "--operation", "Write", "--group", "g")
    with pytest.raises(CliError, match="unknown operation"):
        parsed("--add", "--allow-principal", "User:a", "--operation", "Fly", "--topic", "t")
    with pytest.raises(CliError, match="Type:name"):
        parsed("--add", "--allow-principal", "alice", "--operation", "Read", "--topic", "t")


def test_text_is_kafkas() -> None:
    r = (ResourceType.TOPIC, "t", PatternType.PREFIXED)
    e = AccessControlEntry("User:a", "*", Op.READ, AclPermissionType.ALLOW)
    pattern = "ResourcePattern(resourceType=TOPIC, name=t, patternType=PREFIXED)"
    entry = "(principal=User:a, host=*, operation=READ, permissionType=ALLOW)"
    assert adding_text(r, [e]) == f"Adding ACLs for resource `{pattern}`: \n \t{entry}\n"
    assert current_text(r, [e]) == f"Current ACLs for resource `{pattern}`:\n\t{entry}\n"
