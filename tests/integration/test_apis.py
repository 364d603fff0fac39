"""The APIs a Kafka user reaches for, through real clients: offsets by timestamp,
long-poll fetches, topic admin and configs, cluster description, auto-creation,
consumers with a group.id that assign their own partitions, idempotent producers."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
)

from moldau.protocol.errors import ErrorCode
from moldau.protocol.records import build_batch
from moldau.testing.process import BrokerProcess
from tests.integration import requests as rq
from tests.integration.clients import confluent_consume, confluent_produce, create_topic
from tests.integration.kafka_wire import WireClient

pytestmark = pytest.mark.integration


def test_list_offsets_earliest_latest_and_by_timestamp(bootstrap: str, topic_name: str) -> None:
    create_topic(bootstrap, topic_name)
    base = 1_700_000_000_000
    with WireClient(bootstrap) as c:
        for i in range(10):
            batch = build_batch(
                [(None, b"a"), (None, b"b")], timestamps=[base + i * 100, base + i * 100 + 50]
            )
            c.request(rq.produce(topic_name, 0, batch))
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ts"})
    try:
        lo, hi = consumer.get_watermark_offsets(CTP(topic_name, 0), timeout=10)
        assert (lo, hi) == (0, 20)
        asked = [base - 1, base + 50, base + 51, base + 450, base + 951, base + 10_000]
        found = [
            consumer.offsets_for_times([CTP(topic_name, 0, ts)], timeout=10)[0].offset
            for ts in asked
        ]
        # The first record at or after each timestamp; -1 when there is none (Kafka).
        assert found == [0, 1, 2, 9, -1, -1]
    finally:
        consumer.close()
    from kafka import KafkaConsumer, TopicPartition

    kp = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        r = kp.offsets_for_times({TopicPartition(topic_name, 0): base + 450})
        assert r[TopicPartition(topic_name, 0)].offset == 9
        assert r[TopicPartition(topic_name, 0)].timestamp == base + 450
        assert kp.beginning_offsets([TopicPartition(topic_name, 0)]) == {
            TopicPartition(topic_name, 0): 0
        }
        assert kp.end_offsets([TopicPartition(topic_name, 0)]) == {
            TopicPartition(topic_name, 0): 20
        }
    finally:
        kp.close()


def test_a_fetch_waits_for_data_and_returns_when_it_arrives(
    bootstrap: str, topic_name: str
) -> None:
    create_topic(bootstrap, topic_name)
    result: dict[str, object] = {}

    def long_poll() -> None:
        with WireClient(bootstrap, timeout=30) as c:
            start = time.monotonic()
            r = c.request(rq.fetch(topic_name, 0, 0, max_wait=20_000))
            result["elapsed"] = time.monotonic() - start
            result["records"] = r.responses[0].partitions[0].records

    t = threading.Thread(target=long_poll)
    t.start()
    time.sleep(0.5)
    assert t.is_alive(), "the fetch returned before any data existed"
    confluent_produce(bootstrap, topic_name, [(None, b"wake up", [])])
    t.join(25)
    assert not t.is_alive()
    assert b"wake up" in result["records"]  # type: ignore[operator]
    assert result["elapsed"] < 15  # type: ignore[operator]


def test_a_fetch_without_data_answers_empty_after_max_wait(bootstrap: str, topic_name: str) -> None:
    create_topic(bootstrap, topic_name)
    with WireClient(bootstrap) as c:
        start = time.monotonic()
        r = c.request(rq.fetch(topic_name, 0, 0, max_wait=400))
        elapsed = time.monotonic() - start
    assert r.responses[0].partitions[0].error_code == ErrorCode.none
    assert not r.responses[0].partitions[0].records
    assert elapsed >= 0.35


def test_topic_admin_through_admin_client(bootstrap: str, topic_name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    create_topic(bootstrap, topic_name, 2, **{"retention.ms": "3600000"})
    with pytest.raises(KafkaException) as exists:
        create_topic(bootstrap, topic_name)
    assert exists.value.args[0].code() == ErrorCode.topic_already_exists
    admin.create_partitions([NewPartitions(topic_name, 5)])[topic_name].result(10)
    md = admin.list_topics(topic_name, timeout=10)
    assert len(md.topics[topic_name].partitions) == 5
    with pytest.raises(KafkaException) as fewer:
        admin.create_partitions([NewPartitions(topic_name, 3)])[topic_name].result(10)
    assert fewer.value.args[0].code() == ErrorCode.invalid_partitions

    res = ConfigResource(ConfigResource.Type.TOPIC, topic_name)
    configs = admin.describe_configs([res])[res].result(10)
    assert configs["retention.ms"].value == "3600000"
    assert (
        configs["retention.ms"].source == ConfigResource.Type.TOPIC.value - 1
    )  # DYNAMIC_TOPIC_CONFIG
    assert configs["segment.bytes"].value == "1073741824"
    assert configs["cleanup.policy"].value == "delete"

    res.add_incremental_config(
        ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)
    )
    res.add_incremental_config(
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)
    )
    admin.incremental_alter_configs([res])[res].result(10)
    configs = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic_name)])
    after = next(iter(configs.values())).result(10)
    assert after["retention.ms"].value == "1000"
    assert after["cleanup.policy"].value == "delete,compact"

    bad = ConfigResource(ConfigResource.Type.TOPIC, topic_name)
    bad.add_incremental_config(
        ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)
    )
    with pytest.raises(KafkaException) as invalid:
        admin.incremental_alter_configs([bad])[bad].result(10)
    assert invalid.value.args[0].code() == ErrorCode.invalid_config

    admin.delete_topics([topic_name])[topic_name].result(20)
    assert topic_name not in admin.list_topics(timeout=10).topics
    # The name is free again once deletion completes.
    deadline = time.monotonic() + 20
    while True:
        try:
            create_topic(bootstrap, topic_name, 1)
            break
        except KafkaException as e:
            assert e.args[0].code() == ErrorCode.topic_already_exists
            assert time.monotonic() < deadline
            time.sleep(0.1)
    assert confluent_produce(bootstrap, topic_name, [(None, b"reborn", [])]) == [0]


def test_kafka_python_admin_describes_configs_and_cluster(bootstrap: str, topic_name: str) -> None:
    from kafka.admin import ConfigResource as KCR
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    create_topic(bootstrap, topic_name, **{"max.message.bytes": "5000"})
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        result = admin.describe_configs([KCR(ConfigResourceType.TOPIC, topic_name)])
        text = repr(result)
        assert "max.message.bytes" in text and "5000" in text
        cluster = admin.describe_cluster()
        assert cluster["controller_id"] == 1
        assert [b["broker_id"] for b in cluster["brokers"]] == [1]
    finally:
        admin.close()


def test_broker_configs_are_described(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ConfigResource.Type.BROKER, "1")
    configs = admin.describe_configs([res])[res].result(10)
    assert configs["num.partitions"].value == "1"
    assert configs["auto.create.topics.enable"].value == "true"
    assert configs["log.dirs"].is_read_only
    # A topic default changes at run time, as Kafka's DynamicLogConfig.
    assert not configs["log.segment.bytes"].is_read_only


def test_metadata_creates_unknown_topics_when_allowed(bootstrap: str, topic_name: str) -> None:
    assert confluent_produce(bootstrap, topic_name, [(None, b"auto", [])]) == [0]
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic_name, timeout=10)
    assert len(md.topics[topic_name].partitions) == 1


def test_consumer_with_group_id_assigning_its_own_partitions(
    bootstrap: str, topic_name: str
) -> None:
    create_topic(bootstrap, topic_name, 2)
    confluent_produce(bootstrap, topic_name, [(None, b"%d" % i, []) for i in range(10)])
    errors: list[object] = []
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": f"assigner-{topic_name}",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": True,
        "auto.commit.interval.ms": 100,
        "error_cb": errors.append,
    }
    c = Consumer(conf)
    c.assign([CTP(topic_name, 0)])
    got = []
    deadline = time.monotonic() + 20
    while len(got) < 10 and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None:
            assert m.error() is None, m.error()
            got.append(m.value())
    c.close()  # commits what auto-commit has not yet
    assert got == [b"%d" % i for i in range(10)]
    assert not errors
    # The committed position is where a new consumer of the group resumes.
    c = Consumer(conf)
    committed = c.committed([CTP(topic_name, 0)], timeout=10)
    c.close()
    assert committed[0].offset == 10


def test_idempotent_producer(bootstrap: str, topic_name: str) -> None:
    create_topic(bootstrap, topic_name)
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 1})
    acked = []
    for i in range(2000):
        p.produce(
            topic_name,
            value=b"%d" % i,
            partition=0,
            on_delivery=lambda e, m: acked.append((e, m.offset())),
        )
    assert p.flush(20) == 0
    assert [e for e, _ in acked if e] == []
    assert sorted(o for _, o in acked) == list(range(2000))
    got = confluent_consume(bootstrap, topic_name, 2000)
    assert [v for *_, v, _ in got] == [b"%d" % i for i in range(2000)]


def test_replication_quotas_are_dynamic_broker_configs(fresh_broker: BrokerProcess) -> None:
    """As on Kafka: the replication throttle rates change at run time, for one broker
    or (empty name) all, and say where their value comes from; other broker configs
    are refused with INVALID_REQUEST."""
    from confluent_kafka.admin import ConfigSource as Source

    bootstrap = fresh_broker.start().bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    one = ConfigResource(ConfigResource.Type.BROKER, "1")

    def alter(name: str, value: str | None) -> None:
        op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
        res = ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=[
            ConfigEntry(name, value, incremental_operation=op)
        ])  # fmt: skip
        admin.incremental_alter_configs([res])[res].result(10)

    def alter_default(name: str, value: str) -> None:
        """The cluster default: resource name "" (confluent-kafka cannot send it)."""
        configs = [{"name": name, "config_operation": 0, "value": value}]
        request = rq.request(44, 1, validate_only=False, resources=[
            {"resource_type": 4, "resource_name": "", "configs": configs}
        ])  # fmt: skip
        with WireClient(bootstrap) as c:
            [response] = c.request(request).responses
        assert response.error_code == ErrorCode.none

    def described(name: str) -> tuple[str, Source]:
        entry = admin.describe_configs([one])[one].result(10)[name]
        return entry.value, Source(entry.source)

    rate = "leader.replication.throttled.rate"
    assert described(rate) == (str(2**63 - 1), Source.DEFAULT_CONFIG)
    alter_default(rate, "2000000")
    assert described(rate) == ("2000000", Source.DYNAMIC_DEFAULT_BROKER_CONFIG)
    alter(rate, "1000000")
    assert described(rate) == ("1000000", Source.DYNAMIC_BROKER_CONFIG)
    alter(rate, None)
    assert described(rate) == ("2000000", Source.DYNAMIC_DEFAULT_BROKER_CONFIG)
    with pytest.raises(KafkaException) as e:
        alter("num.partitions", "3")
    assert e.value.args[0].code() == KafkaError.INVALID_REQUEST
    with pytest.raises(KafkaException) as e:
        alter(rate, "fast")
    assert e.value.args[0].code() == KafkaError.INVALID_CONFIG
    # The store keeps them: a restarted broker has them still.
    fresh_broker.stop()
    fresh_broker.start()
    admin = AdminClient({"bootstrap.servers": fresh_broker.bootstrap})
    assert described(rate) == ("2000000", Source.DYNAMIC_DEFAULT_BROKER_CONFIG)


def test_metadata_by_topic_id_answers_the_topic_or_unknown_topic_id(
    bootstrap: str, topic_name: str
) -> None:
    """Kafka's Java client asks by id with the name left "" (its default), not null;
    an id no topic has is UNKNOWN_TOPIC_ID, named by that id."""
    create_topic(bootstrap, topic_name, 2)

    def metadata(topics: list[dict[str, object]]) -> object:
        with WireClient(bootstrap) as c:
            return c.request(
                rq.request(
                    3,
                    12,
                    topics=topics,
                    allow_auto_topic_creation=False,
                    include_topic_authorized_operations=False,
                )
            )

    by_name = metadata([{"name": topic_name, "topic_id": uuid.UUID(int=0)}])
    topic_id = by_name.topics[0].topic_id  # type: ignore[attr-defined]
    assert topic_id != uuid.UUID(int=0)
    (found,) = metadata([{"name": "", "topic_id": topic_id}]).topics  # type: ignore[attr-defined]
    assert (found.error_code, found.name, found.topic_id) == (ErrorCode.none, topic_name, topic_id)
    assert len(found.partitions) == 2
    missing = uuid.uuid4()
    (gone,) = metadata([{"name": "", "topic_id": missing}]).topics  # type: ignore[attr-defined]
    assert (gone.error_code, gone.name, gone.topic_id) == (
        ErrorCode.unknown_topic_id,
        None,
        missing,
    )
