"""The ACL model and Kafka's authorization rules, decided without a broker."""

from __future__ import annotations

import pytest

from moldau.security.acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    binding_error,
    entry_from_json,
    entry_to_json,
)
from moldau.security.authorizer import Authorizer, parse_super_users

Op = AclOperation
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP
ALICE, BOB = "User:alice", "User:bob"


def acl(
    name: str,
    op: AclOperation = Op.READ,
    perm: AclPermissionType = ALLOW,
    principal: str = ALICE,
    host: str = "*",
    rt: ResourceType = TOPIC,
    pattern: PatternType = PatternType.LITERAL,
) -> AclBinding:
    return AclBinding(
        ResourcePattern(rt, name, pattern), AccessControlEntry(principal, host, op, perm)
    )


def may(a: Authorizer, op: AclOperation, name: str, who: str = ALICE, host: str = "10.0.0.1",
        rt: ResourceType = TOPIC) -> bool:  # fmt: skip
    return a.authorize(who, host, op, rt, name)


def test_no_acls_follows_allow_everyone_if_no_acl_found() -> None:
    assert not may(Authorizer([], allow_if_no_acl=False), Op.READ, "t")
    assert may(Authorizer([], allow_if_no_acl=True), Op.READ, "t")


def test_an_acl_for_someone_else_closes_the_resource_even_if_no_acl_allows() -> None:
    a = Authorizer([acl("t", principal=BOB)], allow_if_no_acl=True)
    assert not may(a, Op.READ, "t")
    assert may(a, Op.READ, "t", who=BOB)
    assert may(a, Op.READ, "other")  # no ACL on it: the flag decides


def test_literal_wildcard_and_prefixed_patterns_cover_names() -> None:
    a = Authorizer(
        [acl("exact"), acl("*", Op.WRITE), acl("pay-", Op.DELETE, pattern=PatternType.PREFIXED)]
    )
    assert may(a, Op.READ, "exact") and not may(a, Op.READ, "exactly")
    assert may(a, Op.WRITE, "anything")
    assert may(a, Op.DELETE, "pay-in") and not may(a, Op.DELETE, "pa")
    # a literal "pay-" ACL would not cover "pay-in"; the prefixed one does not cover "x"
    assert not may(a, Op.DELETE, "x")


def test_principal_wildcard_and_host_matching() -> None:
    a = Authorizer([acl("t", principal="User:*", host="10.0.0.1")])
    assert may(a, Op.READ, "t", who=BOB)
    assert not may(a, Op.READ, "t", who=BOB, host="10.0.0.2")


def test_deny_beats_allow() -> None:
    a = Authorizer([acl("*", Op.ALL), acl("secret", Op.READ, DENY)])
    assert may(a, Op.READ, "public")
    assert not may(a, Op.READ, "secret")
    assert may(a, Op.WRITE, "secret")  # the DENY names READ only
    b = Authorizer([acl("t", Op.READ), acl("t", Op.ALL, DENY, host="10.0.0.1")])
    assert not may(b, Op.READ, "t") and may(b, Op.READ, "t", host="10.0.0.9")


def test_prefixed_deny_beats_literal_allow() -> None:
    a = Authorizer(
        [acl("hr-pay", Op.READ), acl("hr-", Op.READ, DENY, pattern=PatternType.PREFIXED)]
    )
    assert not may(a, Op.READ, "hr-pay")


@pytest.mark.parametrize("granted", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.ALL])
def test_describe_is_implied_by_read_write_delete_alter_and_all(granted: AclOperation) -> None:
    assert may(Authorizer([acl("t", granted)]), Op.DESCRIBE, "t")


def test_implications_go_one_way_only() -> None:
    a = Authorizer([acl("t", Op.DESCRIBE), acl("t", Op.ALTER_CONFIGS)])
    assert not may(a, Op.READ, "t")
    assert may(a, Op.DESCRIBE_CONFIGS, "t")
    assert not may(Authorizer([acl("t", Op.READ)]), Op.DESCRIBE_CONFIGS, "t")
    assert not may(Authorizer([acl("t", Op.CREATE)]), Op.DESCRIBE, "t")


def test_deny_describe_is_not_implied_by_deny_read() -> None:
    a = Authorizer([acl("t", Op.ALL), acl("t", Op.READ, DENY)])
    assert may(a, Op.DESCRIBE, "t")


def test_super_users_pass_everything() -> None:
    users = parse_super_users("User:admin; User:ops")
    a = Authorizer([acl("*", Op.ALL, DENY, principal="User:*")], users)
    assert may(a, Op.WRITE, "t", who="User:admin") and may(a, Op.READ, "t", who="User:ops")
    assert not may(a, Op.WRITE, "t")


def test_resource_types_are_separate() -> None:
    a = Authorizer([acl("g", Op.READ, rt=GROUP)])
    assert may(a, Op.READ, "g", rt=GROUP) and not may(a, Op.READ, "g")


def test_authorize_any_for_idempotent_producers() -> None:
    assert Authorizer([acl("t", Op.WRITE)]).authorize_any(ALICE, "h", Op.WRITE, TOPIC)
    assert not Authorizer([acl("t", Op.READ)]).authorize_any(ALICE, "h", Op.WRITE, TOPIC)
    denied_all = Authorizer([acl("t", Op.WRITE), acl("*", Op.WRITE, DENY)])
    assert not denied_all.authorize_any(ALICE, "h", Op.WRITE, TOPIC)
    shadowed = Authorizer(
        [acl("a-1", Op.WRITE), acl("a-", Op.ALL, DENY, pattern=PatternType.PREFIXED)]
    )
    assert not shadowed.authorize_any(ALICE, "h", Op.WRITE, TOPIC)


def test_filters_any_and_match() -> None:
    lit, pre, wild = acl("pay-in"), acl("pay-", pattern=PatternType.PREFIXED), acl("*")
    any_entry = AccessControlEntryFilter(None, None, Op.ANY, AclPermissionType.ANY)

    def found(rt: ResourceType, name: str | None, pt: PatternType) -> list[AclBinding]:
        f = AclBindingFilter(ResourcePatternFilter(rt, name, pt), any_entry)
        return [b for b in (lit, pre, wild) if f.matches(b)]

    assert found(ResourceType.ANY, None, PatternType.ANY) == [lit, pre, wild]
    assert found(TOPIC, "pay-", PatternType.ANY) == [pre]
    assert found(TOPIC, "pay-in", PatternType.MATCH) == [lit, pre, wild]
    assert found(TOPIC, "pay-", PatternType.LITERAL) == []
    assert found(GROUP, None, PatternType.ANY) == []
    by_perm = AclBindingFilter(
        ResourcePatternFilter(ResourceType.ANY, None, PatternType.ANY),
        AccessControlEntryFilter(ALICE, "*", Op.READ, DENY),
    )
    assert not by_perm.matches(lit)


def test_binding_validation() -> None:
    assert binding_error(acl("t")) is None
    assert binding_error(acl("g", Op.WRITE, rt=GROUP)) is not None
    assert binding_error(acl("x", Op.CREATE, rt=ResourceType.CLUSTER)) is not None
    assert binding_error(acl("kafka-cluster", Op.CREATE, rt=ResourceType.CLUSTER)) is None
    assert binding_error(acl("t", principal="alice")) is not None
    assert binding_error(acl("t", pattern=PatternType.MATCH)) is not None


def test_entry_json_is_kafkas() -> None:
    e = AccessControlEntry(ALICE, "*", Op.DESCRIBE_CONFIGS, ALLOW)
    d = entry_to_json(e)
    assert d == {"principal": ALICE, "permissionType": "Allow",
                 "operation": "DescribeConfigs", "host": "*"}  # fmt: skip
    assert entry_from_json(d) == e


@pytest.mark.parametrize(
    "name",
    [
        "moldau.security.Authorizer",
        "kafka.security.authorizer.AclAuthorizer",
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    ],
)
def test_authorizer_class_names_are_moldaus_and_kafkas(name: str) -> None:
    from moldau.config.broker import BrokerConfig

    config = BrokerConfig({"authorizer.class.name": name})
    assert config["authorizer.class.name"] == name
    assert config["allow.everyone.if.no.acl.found"] is False  # Kafka's default


def test_an_unknown_authorizer_is_a_config_error() -> None:
    from moldau.config.broker import BrokerConfig
    from moldau.protocol.errors import InvalidConfigError

    assert BrokerConfig()["authorizer.class.name"] == ""  # none: nothing is checked
    with pytest.raises(InvalidConfigError, match=r"authorizer\.class\.name"):
        BrokerConfig({"authorizer.class.name": "com.example.MyAuthorizer"})
