"""Authorization over PLAINTEXT, where every client is User:ANONYMOUS: a broker
with an authorizer and allow.everyone.if.no.acl.found=false refuses what no ACL
allows, with Kafka's errors, as real clients (confluent-kafka) see them."""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import (
    Consumer,
    ElectionType,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from moldau.protocol.errors import ErrorCode
from moldau.testing.process import BrokerProcess, wait_for
from moldau.testing.sasl import SaslUsers
from tests.integration import requests as rq
from tests.integration.kafka_wire import WireClient

ANON = "User:ANONYMOUS"
AUTHORIZER = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"}
LIT, PRE = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY


def binding(
    rt: ResourceType,
    name: str,
    op: AclOperation,
    perm: AclPermissionType = ALLOW,
    pattern: ResourcePatternType = LIT,
    host: str = "*",
) -> AclBinding:
    return AclBinding(rt, name, pattern, ANON, host, op, perm)


def grant(admin: AdminClient, *bindings: AclBinding) -> None:
    for f in admin.create_acls(list(bindings)).values():
        f.result(timeout=30)


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker whose only ACLs let User:ANONYMOUS administer ACLs and act as a
    broker (CLUSTER_ACTION: the controller and replicas reach it as ANONYMOUS too)
    and nothing else: set while no ACL closed the cluster yet, then restarted with
    allow.everyone.if.no.acl.found=false."""
    data = tmp_path_factory.mktemp("acls") / "data"
    # A group forms at once rather than after 3 s, as on the shared broker.
    settings = {**AUTHORIZER, "group.initial.rebalance.delay.ms": "0"}
    b = BrokerProcess(data, {**settings, "allow.everyone.if.no.acl.found": "true"})
    with b:
        grant(
            AdminClient({"bootstrap.servers": b.bootstrap}),
            *(binding(ResourceType.BROKER, "kafka-cluster", op) for op in
              (AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.CLUSTER_ACTION)),
        )  # fmt: skip
    b.overrides["allow.everyone.if.no.acl.found"] = "false"
    with b.start():
        yield b


@pytest.fixture
def admin(locked: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": locked.bootstrap})


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create(admin: AdminClient, topic: str) -> None:
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)


def produce(bootstrap: str, topic: str, **conf: object) -> KafkaError | None:
    """The delivery error of one record (None: delivered)."""
    got: list[KafkaError | None] = []
    p = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 10_000, **conf})
    p.produce(topic, b"v", on_delivery=lambda err, _: got.append(err))
    p.flush(15)
    assert got, "no delivery report"
    return got[0]


def code(e: BaseException) -> int:
    assert isinstance(e, KafkaException), e
    return int(e.args[0].code())


def test_create_produce_and_delete_need_their_acls(
    locked: BrokerProcess, admin: AdminClient
) -> None:
    topic = name("acl-topic")
    with pytest.raises(KafkaException) as e:
        create(admin, topic)
    assert code(e.value) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    grant(admin, binding(ResourceType.TOPIC, "acl-", AclOperation.CREATE, pattern=PRE))
    create(admin, topic)

    err = produce(locked.bootstrap, topic)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    grant(admin, binding(ResourceType.TOPIC, topic, AclOperation.WRITE))
    assert produce(locked.bootstrap, topic) is None

    with pytest.raises(KafkaException) as e:
        admin.delete_topics([topic])[topic].result(timeout=30)
    assert code(e.value) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    grant(admin, binding(ResourceType.TOPIC, topic, AclOperation.DELETE))
    admin.delete_topics([topic])[topic].result(timeout=30)


def test_deny_beats_allow(locked: BrokerProcess, admin: AdminClient) -> None:
    topic = name("deny")
    grant(
        admin,
        binding(ResourceType.TOPIC, "deny-", AclOperation.ALL, pattern=PRE),
        binding(ResourceType.TOPIC, topic, AclOperation.WRITE, DENY, host="127.0.0.1"),
    )
    create(admin, topic)
    err = produce(locked.bootstrap, topic)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_metadata_hides_topics_the_principal_may_not_describe(
    locked: BrokerProcess, admin: AdminClient
) -> None:
    seen, hidden = name("seen"), name("hidden")
    grant(admin, binding(ResourceType.TOPIC, "seen-", AclOperation.ALL, pattern=PRE),
          binding(ResourceType.TOPIC, "hidden-", AclOperation.CREATE, pattern=PRE))  # fmt: skip
    create(admin, seen)
    create(admin, hidden)
    topics = admin.list_topics(timeout=10).topics
    assert seen in topics and hidden not in topics
    # Asked for by name: refused, whether it exists or not.
    asked = admin.list_topics(hidden, timeout=10).topics[hidden]
    assert asked.error is not None and asked.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_consumer_groups_need_read_on_group_and_topic(
    locked: BrokerProcess, admin: AdminClient
) -> None:
    topic, group = name("cg"), name("group")
    grant(admin, binding(ResourceType.TOPIC, topic, AclOperation.ALL),
          binding(ResourceType.BROKER, "kafka-cluster", AclOperation.CREATE))  # fmt: skip
    create(admin, topic)
    assert produce(locked.bootstrap, topic) is None

    def consume() -> list[bytes | KafkaError]:
        c = Consumer({"bootstrap.servers": locked.bootstrap, "group.id": group,
                      "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
        c.subscribe([topic])
        got: list[bytes | KafkaError] = []
        deadline = time.monotonic() + 20
        try:
            while not got and time.monotonic() < deadline:
                m = c.poll(0.5)
                if m is None:
                    continue
                got.append(m.error() or m.value())
            if got and not isinstance(got[0], KafkaError):
                c.commit(asynchronous=False)
        finally:
            c.close()
        return got

    refused = consume()
    assert isinstance(refused[0], KafkaError)
    assert refused[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    grant(admin, binding(ResourceType.GROUP, group, AclOperation.READ))
    assert consume() == [b"v"]


def test_transactions_need_write_on_the_transactional_id(
    locked: BrokerProcess, admin: AdminClient
) -> None:
    topic, txn = name("txn"), name("tid")
    grant(admin, binding(ResourceType.TOPIC, topic, AclOperation.ALL),
          binding(ResourceType.BROKER, "kafka-cluster", AclOperation.CREATE))  # fmt: skip
    create(admin, topic)
    conf = {"bootstrap.servers": locked.bootstrap, "transactional.id": txn}
    with pytest.raises(KafkaException) as e:
        Producer(conf).init_transactions(15)
    assert code(e.value) == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    grant(admin, binding(ResourceType.TRANSACTIONAL_ID, txn, AclOperation.WRITE))
    p = Producer(conf)
    p.init_transactions(15)
    p.begin_transaction()
    p.produce(topic, b"in a transaction")
    p.commit_transaction(15)


def test_idempotent_producer_needs_write_somewhere(
    locked: BrokerProcess, admin: AdminClient
) -> None:
    topic = name("idem")
    grant(admin, binding(ResourceType.BROKER, "kafka-cluster", AclOperation.CREATE))
    create(admin, topic)
    # WRITE on any topic lets a producer be idempotent (KIP-679).
    grant(admin, binding(ResourceType.TOPIC, topic, AclOperation.WRITE))
    assert produce(locked.bootstrap, topic, **{"enable.idempotence": True}) is None


def test_acls_are_listed_and_deleted(admin: AdminClient) -> None:
    group = name("listed")
    grant(admin, binding(ResourceType.GROUP, group, AclOperation.READ),
          binding(ResourceType.GROUP, group, AclOperation.DELETE, DENY))  # fmt: skip
    f = AclBindingFilter(ResourceType.GROUP, group, ResourcePatternType.ANY, None, None,
                         AclOperation.ANY, AclPermissionType.ANY)  # fmt: skip
    assert len(admin.describe_acls(f).result(timeout=10)) == 2
    deleted = admin.delete_acls([f])[f].result(timeout=10)
    assert {b.operation for b in deleted} == {AclOperation.READ, AclOperation.DELETE}
    assert admin.describe_acls(f).result(timeout=10) == []


def test_super_users_may_do_anything(tmp_path: Path) -> None:
    overrides = {**AUTHORIZER, "super.users": ANON}
    with BrokerProcess(tmp_path / "data", overrides) as b:
        topic = name("super")
        create(AdminClient({"bootstrap.servers": b.bootstrap}), topic)
        assert produce(b.bootstrap, topic) is None


def test_without_an_authorizer_the_acl_apis_are_disabled(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    with pytest.raises(KafkaException) as e:
        grant(admin, binding(ResourceType.TOPIC, "t", AclOperation.READ))
    assert code(e.value) == KafkaError.SECURITY_DISABLED


def test_authorized_operations_come_from_the_acls(admin: AdminClient) -> None:
    from confluent_kafka import TopicCollection

    topic = name("ops")
    grant(admin, binding(ResourceType.TOPIC, topic, AclOperation.WRITE),
          binding(ResourceType.BROKER, "kafka-cluster", AclOperation.CREATE))  # fmt: skip
    create(admin, topic)
    described = admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True)[
        topic
    ].result(timeout=10)
    # WRITE implies DESCRIBE; nothing else was granted on the topic.
    assert set(described.authorized_operations) == {AclOperation.WRITE, AclOperation.DESCRIBE}
    cluster = admin.describe_cluster(include_authorized_operations=True).result(timeout=10)
    ops = set(cluster.authorized_operations)
    assert {AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.CLUSTER_ACTION} <= ops
    assert AclOperation.IDEMPOTENT_WRITE not in ops and AclOperation.ALTER_CONFIGS not in ops


def test_without_alter_on_the_cluster_acls_and_leaders_cannot_be_changed(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "data", AUTHORIZER) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        with pytest.raises(KafkaException) as e:
            grant(admin, binding(ResourceType.TOPIC, "t", AclOperation.READ))
        assert code(e.value) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
        f = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)  # fmt: skip
        # librdkafka drops DescribeAcls' error code (an empty list): asked directly.
        with WireClient(b.bootstrap) as c:
            got = c.request(
                rq.request(
                    29,
                    3,
                    resource_type_filter=1,
                    resource_name_filter=None,
                    pattern_type_filter=1,
                    principal_filter=None,
                    host_filter=None,
                    operation=1,
                    permission_type=1,
                )
            )
        assert (got.error_code, got.resources) == (ErrorCode.cluster_authorization_failed, ())
        with pytest.raises(KafkaException) as e:
            admin.delete_acls([f])[f].result(timeout=10)
        assert code(e.value) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
        # A follower's fetch needs CLUSTER_ACTION: refused per partition (Fetch v4 has no
        # top-level error), the connection kept.
        follower = dataclasses.replace(rq.fetch("t", 0, 0, version=4), replica_id=2)
        with WireClient(b.bootstrap) as c:
            got = c.request(follower, 4)
        [p] = got.responses[0].partitions
        assert p.error_code == ErrorCode.topic_authorization_failed
        # Leader elections need ALTER on the cluster too.
        with pytest.raises(KafkaException) as e:
            admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("t", 0)]).result(10)
        assert code(e.value) == KafkaError.CLUSTER_AUTHORIZATION_FAILED


def test_a_transactional_produce_needs_write_on_its_transactional_id(
    locked: BrokerProcess, admin: AdminClient
) -> None:
    topic = name("txn-produce")
    grant(admin, binding(ResourceType.TOPIC, topic, AclOperation.ALL),
          binding(ResourceType.BROKER, "kafka-cluster", AclOperation.CREATE))  # fmt: skip
    create(admin, topic)
    req = rq.request(0, 9, transactional_id="not-mine", acks=1, timeout=5000,
                     topic_data=[{"name": topic, "partition_data": [
                         {"index": 0, "records": b"\0" * 61}]}])  # fmt: skip
    with WireClient(locked.bootstrap) as c:
        got = c.request(req)
    [p] = got.responses[0].partition_responses
    # Answered per partition (Produce has no top-level error), the connection kept.
    assert p.error_code == ErrorCode.transactional_id_authorization_failed


def test_a_created_topics_configs_need_describe_configs(
    locked: BrokerProcess, admin: AdminClient
) -> None:
    hidden, shown = name("cfg-hidden"), name("cfg-shown")
    grant(admin, binding(ResourceType.TOPIC, "cfg-", AclOperation.CREATE, pattern=PRE),
          binding(ResourceType.TOPIC, shown, AclOperation.DESCRIBE_CONFIGS))  # fmt: skip
    with WireClient(locked.bootstrap) as c:
        got = c.request(rq.create_topics(hidden, shown))
    by_name = {t.name: t for t in got.topics}
    assert by_name[hidden].error_code == ErrorCode.none
    assert by_name[hidden].topic_config_error_code == ErrorCode.topic_authorization_failed
    assert not by_name[hidden].configs
    assert by_name[shown].topic_config_error_code == ErrorCode.none
    assert by_name[shown].configs


def test_acls_decide_for_the_user_a_sasl_login_names(tmp_path: Path) -> None:
    """Authentication and authorization together, as a secured cluster runs: two SCRAM
    users log in over SASL_PLAINTEXT; an ACL lets alice write to a topic, so her
    records are acknowledged, while bob, authenticated as well, is refused with
    TOPIC_AUTHORIZATION_FAILED. The PLAINTEXT listener is the operator's (its
    User:ANONYMOUS is a super user)."""
    from confluent_kafka import KafkaError, Producer
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        NewTopic,
        ResourcePatternType,
        ResourceType,
    )

    scram = "SCRAM-SHA-256"
    users = SaslUsers(
        {u: f"{u}-secret" for u in ("admin", "alice", "bob")},
        mechanisms=(scram,),
        inter_broker_mechanism=scram,
    )
    overrides = {**AUTHORIZER, "super.users": ANON, "allow.everyone.if.no.acl.found": "false"}
    with BrokerProcess(tmp_path / "data", overrides, sasl=users) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic("orders", 1, 1)])["orders"].result(10)
        grant = AclBinding(
            ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:alice", "*",
            AclOperation.WRITE, AclPermissionType.ALLOW,
        )  # fmt: skip
        for f in admin.create_acls([grant]).values():
            f.result(10)

        def produce_as(user: str) -> KafkaError | None:
            outcome: list[KafkaError | None] = []
            p = Producer(b.sasl_client_config(user, scram) | {"message.timeout.ms": 10_000})
            p.produce(
                "orders", b"from " + user.encode(), on_delivery=lambda e, _: outcome.append(e)
            )
            p.flush(15)
            return outcome[0] if outcome else None

        assert produce_as("alice") is None
        refused = produce_as("bob")
        assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_client_quotas_need_cluster_describe_configs_and_alter_configs(
    locked: BrokerProcess, admin: AdminClient
) -> None:
    """As Kafka: DescribeClientQuotas needs DESCRIBE_CONFIGS on the cluster (its one
    top-level error), AlterClientQuotas ALTER_CONFIGS (an error per entry)."""
    describe = rq.request(48, 1, strict=False, components=[])
    entry = {"entity": [{"entity_type": "client-id", "entity_name": "acl-quota"}],
             "ops": [{"key": "producer_byte_rate", "value": 1024.0, "remove": False}]}  # fmt: skip
    alter = rq.request(49, 1, validate_only=True, entries=[entry])
    with WireClient(locked.bootstrap) as c:
        assert c.request(describe).error_code == ErrorCode.cluster_authorization_failed
        [refused] = c.request(alter).entries
        assert refused.error_code == ErrorCode.cluster_authorization_failed
    allowed = binding(ResourceType.BROKER, "kafka-cluster", AclOperation.ALTER_CONFIGS)
    grant(admin, allowed)
    try:
        with WireClient(locked.bootstrap) as c:
            # ALTER_CONFIGS implies DESCRIBE_CONFIGS.
            assert wait_for(lambda: c.request(describe).error_code == ErrorCode.none, 10)
            [done] = c.request(alter).entries
            assert done.error_code == ErrorCode.none
    finally:
        f = AclBindingFilter(ResourceType.BROKER, "kafka-cluster", LIT, None, None,
                             AclOperation.ALTER_CONFIGS, ALLOW)  # fmt: skip
        admin.delete_acls([f])[f].result(timeout=10)
