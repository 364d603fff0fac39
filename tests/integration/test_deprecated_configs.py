"""Configs Kafka 3.9 deprecates but still accepts (message.format.version,
message.timestamp.difference.max.ms and their broker defaults) are accepted by
CreateTopics, AlterConfigs, IncrementalAlterConfigs and server.properties with a
warning in the broker's log, and described as Kafka 3.9 describes them; the other topic
configs of Kafka 3.9 that Moldau lacked are accepted too."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)

from moldau.protocol.errors import ErrorCode
from moldau.testing.process import BrokerProcess, wait_for
from tests.integration.clients import confluent_produce
from tests.integration.test_old_clients import fetch_raw

pytestmark = pytest.mark.integration

# Every topic config of Kafka 3.9's LogConfig.
KAFKA_39_TOPIC_CONFIGS = {
    "cleanup.policy", "compression.type", "compression.gzip.level", "compression.lz4.level",
    "compression.zstd.level", "delete.retention.ms", "file.delete.delay.ms", "flush.messages",
    "flush.ms", "follower.replication.throttled.replicas", "index.interval.bytes",
    "leader.replication.throttled.replicas", "local.retention.bytes", "local.retention.ms",
    "max.compaction.lag.ms", "max.message.bytes", "message.downconversion.enable",
    "message.format.version", "message.timestamp.after.max.ms",
    "message.timestamp.before.max.ms", "message.timestamp.difference.max.ms",
    "message.timestamp.type", "min.cleanable.dirty.ratio", "min.compaction.lag.ms",
    "min.insync.replicas", "preallocate", "remote.log.copy.disable",
    "remote.log.delete.on.disable", "remote.storage.enable", "retention.bytes",
    "retention.ms", "segment.bytes", "segment.index.bytes", "segment.jitter.ms", "segment.ms",
    "unclean.leader.election.enable",
}  # fmt: skip


@pytest.fixture(scope="module")
def old_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker whose server.properties still names the old message format."""
    data = tmp_path_factory.mktemp("deprecated") / "data"
    with BrokerProcess(data, {"log.message.format.version": "0.10.2"}) as b:
        yield b


def topic_configs(admin: AdminClient, topic: str) -> dict[str, object]:
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return dict(admin.describe_configs([res])[res].result(10))


def error_of(future: object) -> int:
    with pytest.raises(KafkaException) as e:
        future.result(10)  # type: ignore[attr-defined]
    return int(e.value.args[0].code())


def test_server_properties_with_log_message_format_version_start_warn_and_describe_it(
    old_broker: BrokerProcess,
) -> None:
    log = old_broker.log_path.read_text()
    assert "log.message.format.version=0.10.2 is deprecated" in log
    admin = AdminClient({"bootstrap.servers": old_broker.bootstrap})
    res = ConfigResource(ConfigResource.Type.BROKER, "1")
    broker = admin.describe_configs([res])[res].result(10)
    assert broker["log.message.format.version"].value == "0.10.2"
    assert broker["log.message.format.version"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert broker["log.message.timestamp.difference.max.ms"].value == str(2**63 - 1)
    assert broker["log.message.downconversion.enable"].value == "true"

    topic = f"t-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    configs = topic_configs(admin, topic)
    assert set(configs) == KAFKA_39_TOPIC_CONFIGS
    mfv = configs["message.format.version"]
    assert (mfv.value, mfv.source) == ("0.10.2", ConfigSource.STATIC_BROKER_CONFIG.value)  # type: ignore[attr-defined]
    assert configs["message.timestamp.difference.max.ms"].value == str(2**63 - 1)  # type: ignore[attr-defined]
    assert configs["compression.zstd.level"].value == "3"  # type: ignore[attr-defined]
    assert configs["remote.storage.enable"].value == "false"  # type: ignore[attr-defined]
    # Ignored: the batches are v2 and read back by a modern client.
    assert confluent_produce(old_broker.bootstrap, topic, [(b"k", b"v", [])]) == [0]


def test_deprecated_topic_configs_are_accepted_by_every_admin_request_with_a_warning(
    old_broker: BrokerProcess,
) -> None:
    bootstrap = old_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = f"old-{uuid.uuid4().hex[:8]}"
    created = NewTopic(topic, 1, 1, config={"message.format.version": "0.10.0-IV1"})
    admin.create_topics([created])[topic].result(10)
    assert topic_configs(admin, topic)["message.format.version"].value == "0.10.0-IV1"  # type: ignore[attr-defined]

    # AlterConfigs (the legacy request: the whole set of overrides).
    whole = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        set_config={"message.format.version": "2.8", "retention.ms": "3600000"},
    )
    with pytest.warns(DeprecationWarning):  # the client's own: it prefers the incremental one
        altered = admin.alter_configs([whole])  # type: ignore[attr-defined]
    altered[whole].result(10)
    configs = topic_configs(admin, topic)
    assert configs["message.format.version"].value == "2.8"  # type: ignore[attr-defined]
    assert configs["message.format.version"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value  # type: ignore[attr-defined]

    # IncrementalAlterConfigs: still in force in Kafka 3.9 where before/after are unset.
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    res.add_incremental_config(
        ConfigEntry(
            "message.timestamp.difference.max.ms",
            "3600000",
            incremental_operation=AlterConfigOpType.SET,
        )
    )
    admin.incremental_alter_configs([res])[res].result(10)
    configs = topic_configs(admin, topic)
    assert configs["message.timestamp.difference.max.ms"].value == "3600000"  # type: ignore[attr-defined]
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    outcome: list[int | None] = []

    def delivered(err: KafkaError | None, _: object) -> None:
        outcome.append(err.code() if err else None)

    def sent(**timestamp: int) -> int | None:
        # One a batch: librdkafka names records only for INVALID_RECORD (KIP-467) and
        # fails a whole batch refused with INVALID_TIMESTAMP.
        outcome.clear()
        producer.produce(topic, b"v", key=b"k", on_delivery=delivered, **timestamp)
        assert producer.flush(30) == 0
        return outcome[0]

    two_hours_ago = int(time.time() * 1000) - 2 * 3_600_000
    # The change reaches the partition's leader through /config/changes.
    assert wait_for(lambda: sent(timestamp=two_hours_ago) == KafkaError.INVALID_TIMESTAMP)
    assert sent() is None

    log = old_broker.log_path.read_text()
    assert f"message.format.version=0.10.0-IV1 of {topic} is deprecated" in log
    assert f"message.format.version=2.8 of {topic} is deprecated" in log
    assert f"message.timestamp.difference.max.ms=3600000 of {topic} is deprecated" in log


def test_bad_values_of_the_configs_kafka_39_has_are_invalid_config(
    old_broker: BrokerProcess,
) -> None:
    admin = AdminClient({"bootstrap.servers": old_broker.bootstrap})
    topic = f"bad-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    for name, value in [
        ("message.format.version", "0.7"),
        ("message.format.version", "3.0-IV9"),
        ("message.timestamp.difference.max.ms", "-1"),
        ("compression.gzip.level", "0"),
        ("compression.zstd.level", "23"),
        # Moldau has no tiered storage: as Kafka with it disabled in the broker.
        ("remote.storage.enable", "true"),
    ]:
        res = ConfigResource(ConfigResource.Type.TOPIC, topic)
        res.add_incremental_config(
            ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
        )
        assert error_of(admin.incremental_alter_configs([res])[res]) == ErrorCode.invalid_config, (
            name,
            value,
        )
    for name, value in [
        ("compression.gzip.level", "-1"),
        ("compression.lz4.level", "17"),
        ("compression.zstd.level", "-5"),
        ("local.retention.ms", "-2"),
        ("remote.log.copy.disable", "false"),
    ]:
        res = ConfigResource(ConfigResource.Type.TOPIC, topic)
        res.add_incremental_config(
            ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
        )
        admin.incremental_alter_configs([res])[res].result(10)


def test_without_down_conversion_an_old_fetch_is_unsupported_version(
    old_broker: BrokerProcess,
) -> None:
    """message.downconversion.enable=false: Fetch v0-v3 get UNSUPPORTED_VERSION, v4+ read."""
    bootstrap = old_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = f"noconv-{uuid.uuid4().hex[:8]}"
    created = NewTopic(topic, 1, 1, config={"message.downconversion.enable": "false"})
    admin.create_topics([created])[topic].result(10)
    assert confluent_produce(bootstrap, topic, [(b"k", b"v", [])]) == [0]
    for version in (0, 3):
        assert fetch_raw(bootstrap, topic, version, 1 << 20) == (ErrorCode.unsupported_version, b"")
    allowed = f"conv-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(allowed, 1, 1)])[allowed].result(10)
    assert confluent_produce(bootstrap, allowed, [(b"k", b"v", [])]) == [0]
    error, records = fetch_raw(bootstrap, allowed, 3, 1 << 20)
    assert error == ErrorCode.none and records
