"""Broker and topic configs: Kafka's names, defaults, derived defaults, validation,
and how DescribeConfigs reports sources."""

from __future__ import annotations

from pathlib import Path

import pytest

from moldau.config.broker import BrokerConfig, read_properties
from moldau.config.topic import ConfigSource, describe, log_config, resolve
from moldau.protocol.errors import InvalidConfigError
from moldau.protocol.records import TimestampType


def test_server_properties_are_read_like_java_properties(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text(
        "# comment\n! another\nbroker.id=3\nlog.dirs = /a,/b\nnum.partitions: 4\n"
        "listeners=PLAINTEXT://:9092,\\\n  OTHER://:9093\nunused.key=1\n"
    )
    props = read_properties(path)
    assert props["broker.id"] == "3"
    assert props["log.dirs"] == "/a,/b"
    assert props["num.partitions"] == "4"
    assert props["listeners"] == "PLAINTEXT://:9092,OTHER://:9093"
    config = BrokerConfig(props)
    assert config.broker_id == 3
    assert [str(d) for d in config.log_dirs] == ["/a", "/b"]
    assert config["num.partitions"] == 4


def test_bad_values_are_refused_with_the_property_name() -> None:
    with pytest.raises(InvalidConfigError, match=r"num\.partitions"):
        BrokerConfig({"num.partitions": "many"})
    with pytest.raises(InvalidConfigError, match=r"num\.partitions"):
        BrokerConfig({"num.partitions": "0"})
    with pytest.raises(InvalidConfigError, match=r"log\.message\.timestamp\.type"):
        BrokerConfig({"log.message.timestamp.type": "Whenever"})


def test_topic_defaults_come_from_broker_properties_and_their_chains() -> None:
    broker = BrokerConfig(
        {"log.retention.hours": "2", "log.segment.bytes": "1000", "message.max.bytes": "77"}
    )
    values = resolve({}, broker)
    assert values["retention.ms"] == 2 * 3_600_000
    assert values["segment.bytes"] == 1000
    assert values["max.message.bytes"] == 77
    minutes_win = BrokerConfig({"log.retention.hours": "2", "log.retention.minutes": "3"})
    assert resolve({}, minutes_win)["retention.ms"] == 3 * 60_000
    assert resolve({"retention.ms": "5"}, broker)["retention.ms"] == 5


def test_log_config_reflects_the_topic_config() -> None:
    broker = BrokerConfig({})
    config = log_config(
        resolve(
            {"cleanup.policy": "compact,delete", "message.timestamp.type": "LogAppendTime"}, broker
        )
    )
    assert config.compact and config.delete
    assert config.message_timestamp_type == TimestampType.LOG_APPEND_TIME
    assert config.segment_bytes == 1024**3


def test_describe_reports_sources_and_synonyms() -> None:
    broker = BrokerConfig({"log.retention.ms": "1000"})
    described = {c.name: c for c in describe({"segment.ms": "5"}, broker)}
    assert described["segment.ms"].value == "5"
    assert described["segment.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert described["retention.ms"].value == "1000"
    assert described["retention.ms"].source == ConfigSource.STATIC_BROKER_CONFIG
    # As Kafka's: each layer in turn, the property's names within it (the default is
    # log.retention.hours: .ms and .minutes have none).
    assert described["retention.ms"].synonyms == (
        ("log.retention.ms", "1000", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
    )
    assert described["cleanup.policy"].source == ConfigSource.DEFAULT_CONFIG
    assert described["cleanup.policy"].value == "delete"
    # Booleans from the broker's properties print as Kafka prints them, not as 0 and 1.
    assert described["preallocate"].value == "false"
    assert described["message.downconversion.enable"].value == "true"
    assert described["unclean.leader.election.enable"].value == "false"


def test_a_time_config_lists_synonyms_only_from_its_primary_property_on_as_kafka() -> None:
    """Kafka's ConfigHelper.configSynonyms drops the synonyms before the primary name: a
    retention given in hours only, or left at its default, lists none, with the value
    still the effective one."""
    broker = BrokerConfig({"log.retention.hours": "24", "log.roll.ms": "1000"})
    described = {c.name: c for c in describe({}, broker)}
    retention = described["retention.ms"]
    assert (retention.value, retention.source, retention.synonyms) == (
        "86400000", ConfigSource.DEFAULT_CONFIG, ()
    )  # fmt: skip
    assert described["flush.ms"].synonyms == ()
    assert described["segment.ms"].synonyms == (
        ("log.roll.ms", "1000", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.roll.hours", "168", ConfigSource.DEFAULT_CONFIG),
    )
    assert described["max.message.bytes"].synonyms == (
        ("message.max.bytes", "1048588", ConfigSource.DEFAULT_CONFIG),
    )


def test_properties_files_are_read_as_java_reads_them_iso_8859_1(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_bytes(b"# caf\xe9 settings\nbroker.rack=r\xe9gion-1\nnum.partitions=3\n")
    assert read_properties(path) == {"broker.rack": "région-1", "num.partitions": "3"}
