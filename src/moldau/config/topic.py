"""Topic-level configs (Kafka's LogConfig): name, type, default, the broker property
that supplies its default, and doc. Also how a topic's effective config is resolved
and described (DescribeConfigs sources and synonyms)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from moldau.config.configdef import (
    ConfigDef,
    ConfigKey,
    ConfigType,
    at_least,
    between,
    level,
    metadata_version,
    one_of,
    to_string,
)
from moldau.config.configdef import ConfigType as T
from moldau.config.configdef import Importance as I
from moldau.protocol.errors import InvalidConfigError
from moldau.protocol.records import Compression, TimestampType
from moldau.storage.log_config import LogConfig

LONG_MAX = 2**63 - 1

log = logging.getLogger(__name__)


def _no_tiered_storage(name: str, value: Any) -> None:
    if value:
        raise InvalidConfigError(
            f"Invalid value true for configuration {name}: tiered storage is not available "
            "on this broker (Moldau has none)"
        )


TOPIC_CONFIG = ConfigDef(
    [
        ConfigKey("cleanup.policy", T.LIST, ["delete"], I.MEDIUM,
                  "delete and/or compact: what happens to old segments.",
                  one_of("delete", "compact"), "log.cleanup.policy"),
        ConfigKey("compression.type", T.STRING, "producer", I.MEDIUM,
                  "Final compression of the topic's data; 'producer' keeps the producer's codec.",
                  one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
                  "compression.type"),
        ConfigKey("delete.retention.ms", T.LONG, 86_400_000, I.MEDIUM,
                  "How long tombstones are kept in compacted topics.", at_least(0),
                  "log.cleaner.delete.retention.ms"),
        ConfigKey("file.delete.delay.ms", T.LONG, 60_000, I.MEDIUM,
                  "Time to wait before deleting a file from the filesystem.", at_least(0),
                  "log.segment.delete.delay.ms"),
        ConfigKey("flush.messages", T.LONG, LONG_MAX, I.MEDIUM,
                  "Force an fsync after this many messages (1: after every append).",
                  at_least(1), "log.flush.interval.messages"),
        ConfigKey("flush.ms", T.LONG, LONG_MAX, I.MEDIUM,
                  "Force an fsync after this much time.", at_least(0), "log.flush.interval.ms"),
        ConfigKey("index.interval.bytes", T.INT, 4096, I.MEDIUM,
                  "How often an offset index entry is added.", at_least(0),
                  "log.index.interval.bytes"),
        ConfigKey("max.compaction.lag.ms", T.LONG, LONG_MAX, I.MEDIUM,
                  "Maximum time a message stays ineligible for compaction.", at_least(1),
                  "log.cleaner.max.compaction.lag.ms"),
        ConfigKey("max.message.bytes", T.INT, 1_048_588, I.MEDIUM,
                  "Largest record batch size allowed.", at_least(0), "message.max.bytes"),
        ConfigKey("message.timestamp.after.max.ms", T.LONG, LONG_MAX, I.MEDIUM,
                  "How far a CreateTime timestamp may be ahead of the broker's clock.",
                  at_least(0), "log.message.timestamp.after.max.ms"),
        ConfigKey("message.timestamp.before.max.ms", T.LONG, LONG_MAX, I.MEDIUM,
                  "How far a CreateTime timestamp may be behind the broker's clock.",
                  at_least(0), "log.message.timestamp.before.max.ms"),
        ConfigKey("message.timestamp.type", T.STRING, "CreateTime", I.MEDIUM,
                  "CreateTime or LogAppendTime.", one_of("CreateTime", "LogAppendTime"),
                  "log.message.timestamp.type"),
        ConfigKey("min.cleanable.dirty.ratio", T.DOUBLE, 0.5, I.MEDIUM,
                  "Dirty ratio above which the log cleaner compacts.", between(0, 1),
                  "log.cleaner.min.cleanable.ratio"),
        ConfigKey("min.compaction.lag.ms", T.LONG, 0, I.MEDIUM,
                  "Minimum time a message stays uncompacted.", at_least(0),
                  "log.cleaner.min.compaction.lag.ms"),
        ConfigKey("min.insync.replicas", T.INT, 1, I.MEDIUM,
                  "Minimum ISR size for acks=all produce.", at_least(1), "min.insync.replicas"),
        ConfigKey("preallocate", T.BOOLEAN, False, I.MEDIUM,
                  "Preallocate segment files (accepted, has no effect).", None,
                  "log.preallocate"),
        ConfigKey("retention.bytes", T.LONG, -1, I.MEDIUM,
                  "Maximum size of a partition's log before old segments are deleted.", None,
                  "log.retention.bytes"),
        ConfigKey("retention.ms", T.LONG, 604_800_000, I.MEDIUM,
                  "Maximum age of a segment before it is deleted (-1: no limit).",
                  at_least(-1), "log.retention.ms"),
        ConfigKey("segment.bytes", T.INT, 1_073_741_824, I.MEDIUM,
                  "Segment file size.", at_least(14), "log.segment.bytes"),
        ConfigKey("segment.index.bytes", T.INT, 10_485_760, I.MEDIUM,
                  "Maximum size of a segment's offset index.", at_least(4),
                  "log.index.size.max.bytes"),
        ConfigKey("segment.jitter.ms", T.LONG, 0, I.MEDIUM,
                  "Random jitter subtracted from segment.ms.", at_least(0), "log.roll.jitter.ms"),
        ConfigKey("segment.ms", T.LONG, 604_800_000, I.MEDIUM,
                  "Time after which a segment is rolled.", at_least(1), "log.roll.ms"),
        ConfigKey("unclean.leader.election.enable", T.BOOLEAN, False, I.MEDIUM,
                  "Allow replicas outside the ISR to become leader as a last resort.", None,
                  "unclean.leader.election.enable"),
        ConfigKey("compression.gzip.level", T.INT, -1, I.MEDIUM,
                  "Level of the batches the broker recompresses to gzip.", level(1, 9, -1),
                  "compression.gzip.level"),
        ConfigKey("compression.lz4.level", T.INT, 9, I.MEDIUM,
                  "Level of the batches the broker recompresses to lz4.", level(1, 17),
                  "compression.lz4.level"),
        ConfigKey("compression.zstd.level", T.INT, 3, I.MEDIUM,
                  "Level of the batches the broker recompresses to zstd.", level(-131072, 22),
                  "compression.zstd.level"),
        ConfigKey("message.format.version", T.STRING, "3.0-IV1", I.MEDIUM,
                  "[DEPRECATED] The message format of appended batches; ignored: every batch is "
                  "written in magic v2.", metadata_version(), "log.message.format.version",
                  deprecated="ignored: every batch is written in magic v2, as Kafka with an "
                  "inter-broker protocol of 3.0 or later does"),
        ConfigKey("message.timestamp.difference.max.ms", T.LONG, LONG_MAX, I.MEDIUM,
                  "[DEPRECATED] How far a CreateTime timestamp may be from the broker's clock, "
                  "either way; message.timestamp.before.max.ms and after.max.ms take its value "
                  "unless set.", at_least(0), "log.message.timestamp.difference.max.ms",
                  deprecated="still applies where message.timestamp.before.max.ms or "
                  "message.timestamp.after.max.ms is not set; use those instead"),
        ConfigKey("message.downconversion.enable", T.BOOLEAN, True, I.LOW,
                  "Whether Fetch v0-v3 answers are converted to the old message formats "
                  "(false: UNSUPPORTED_VERSION).", None, "log.message.downconversion.enable"),
        ConfigKey("remote.storage.enable", T.BOOLEAN, False, I.MEDIUM,
                  "Tiered storage; Moldau has none, so only false is accepted.",
                  _no_tiered_storage),
        ConfigKey("local.retention.ms", T.LONG, -2, I.MEDIUM,
                  "Local retention under tiered storage (accepted, unused).", at_least(-2),
                  "log.local.retention.ms"),
        ConfigKey("local.retention.bytes", T.LONG, -2, I.MEDIUM,
                  "Local retention under tiered storage (accepted, unused).", at_least(-2),
                  "log.local.retention.bytes"),
        ConfigKey("remote.log.copy.disable", T.BOOLEAN, False, I.MEDIUM,
                  "Tiered storage (accepted, unused).", None, None),
        ConfigKey("remote.log.delete.on.disable", T.BOOLEAN, False, I.MEDIUM,
                  "Tiered storage (accepted, unused).", None, None),
        ConfigKey("leader.replication.throttled.replicas", T.LIST, [], I.MEDIUM,
                  "Partition:broker pairs (or *) whose leader holds data back from "
                  "out-of-sync followers over leader.replication.throttled.rate.", None, None),
        ConfigKey("follower.replication.throttled.replicas", T.LIST, [], I.MEDIUM,
                  "Partition:broker pairs (or *) whose out-of-sync follower fetches no more "
                  "than follower.replication.throttled.rate.", None, None),
    ]
)  # fmt: skip


class ConfigSource(IntEnum):
    """DescribeConfigs config_source values."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


@dataclass(frozen=True, slots=True)
class DescribedConfig:
    name: str
    value: str | None
    source: ConfigSource
    type: ConfigType
    doc: str
    read_only: bool
    # (name, value, source), most specific first, as DescribeConfigs v1+ lists them.
    synonyms: tuple[tuple[str, str | None, ConfigSource], ...]


def validate_topic_overrides(
    raw: Mapping[str, str | None], topic: str | None = None
) -> dict[str, Any]:
    """Parse a topic's override strings; InvalidConfigError on a bad one. A deprecated
    config Kafka 3.9 still accepts is accepted, with a warning in the broker's log."""
    parsed = TOPIC_CONFIG.parse({k: v for k, v in raw.items() if v is not None})
    for name in parsed:
        why = TOPIC_CONFIG.keys[name].deprecated
        if why is not None:
            log.warning(
                "Topic config %s=%s%s is deprecated (removed in Kafka 4.0), %s",
                name, raw[name], f" of {topic}" if topic else "", why,
            )  # fmt: skip
    return parsed


def resolve(overrides: Mapping[str, str], broker: BrokerDefaults) -> dict[str, Any]:
    """Effective topic config: override, else broker default, else Kafka's default."""
    parsed = TOPIC_CONFIG.parse(overrides, ignore_unknown=True)
    out: dict[str, Any] = {}
    for key in TOPIC_CONFIG.keys.values():
        if key.name in parsed:
            out[key.name] = parsed[key.name]
        else:
            out[key.name] = broker.topic_default(key)
    return out


def describe(overrides: Mapping[str, str], broker: BrokerDefaults) -> list[DescribedConfig]:
    parsed = TOPIC_CONFIG.parse(overrides, ignore_unknown=True)
    out = []
    for key in TOPIC_CONFIG.keys.values():
        synonyms: list[tuple[str, str | None, ConfigSource]] = []
        if key.name in parsed:
            synonyms.append(
                (key.name, to_string(parsed[key.name]), ConfigSource.DYNAMIC_TOPIC_CONFIG)
            )
        if key.server_default is not None:
            synonyms += broker.synonyms(key.server_default)
        value = to_string(parsed[key.name] if key.name in parsed else broker.topic_default(key))
        source = synonyms[0][2] if synonyms else ConfigSource.DEFAULT_CONFIG
        out.append(
            DescribedConfig(
                key.name, value, source, key.type, key.doc, key.read_only, tuple(synonyms)
            )
        )
    return out


class BrokerDefaults:
    """What a topic config needs from the broker config: the server defaults."""

    def is_set(self, name: str) -> bool:
        """Set in server.properties (or by an override), under this name or a synonym."""
        raise NotImplementedError

    def synonyms(self, name: str) -> list[tuple[str, str | None, ConfigSource]]:
        """Where a broker property's value may come from, most specific first, as Kafka's
        DescribeConfigs lists a topic config's synonyms."""
        raise NotImplementedError

    def topic_default(self, key: ConfigKey) -> Any:
        raise NotImplementedError


_CODECS: dict[str, Compression | None] = {
    "producer": None,
    "uncompressed": Compression.NONE,
    "gzip": Compression.GZIP,
    "snappy": Compression.SNAPPY,
    "lz4": Compression.LZ4,
    "zstd": Compression.ZSTD,
}


def _or_difference(values: Mapping[str, Any], name: str) -> int:
    """before/after.max.ms, or the deprecated difference.max.ms while they are at their
    default (Kafka 3.9's transition rule)."""
    value = int(values[name])
    return value if value != LONG_MAX else int(values["message.timestamp.difference.max.ms"])


# The broker properties that supply topic defaults, which Kafka lets change at run time
# for one broker or the whole cluster (its DynamicLogConfig), all but the message format
# (Kafka would have to check every broker supports it).
DYNAMIC_LOG_CONFIGS = frozenset(
    key.server_default
    for key in TOPIC_CONFIG.keys.values()
    if key.server_default is not None and key.name != "message.format.version"
)


def log_config(values: Mapping[str, Any]) -> LogConfig:
    """The storage layer's view of an effective topic config."""
    policy = values["cleanup.policy"]
    return LogConfig(
        segment_bytes=values["segment.bytes"],
        segment_ms=values["segment.ms"],
        segment_jitter_ms=values["segment.jitter.ms"],
        segment_index_bytes=values["segment.index.bytes"],
        index_interval_bytes=values["index.interval.bytes"],
        retention_ms=values["retention.ms"],
        retention_bytes=values["retention.bytes"],
        max_message_bytes=values["max.message.bytes"],
        message_timestamp_type=(
            TimestampType.LOG_APPEND_TIME
            if values["message.timestamp.type"] == "LogAppendTime"
            else TimestampType.CREATE_TIME
        ),
        message_timestamp_before_max_ms=_or_difference(values, "message.timestamp.before.max.ms"),
        message_timestamp_after_max_ms=_or_difference(values, "message.timestamp.after.max.ms"),
        flush_messages=values["flush.messages"],
        flush_ms=values["flush.ms"],
        file_delete_delay_ms=values["file.delete.delay.ms"],
        compression=_CODECS[values["compression.type"]],
        compression_level=values.get(f"compression.{values['compression.type']}.level"),
        codec_levels=tuple(
            (codec, values[f"compression.{codec.name.lower()}.level"])
            for codec in (Compression.GZIP, Compression.LZ4, Compression.ZSTD)
        ),
        compact="compact" in policy,
        min_cleanable_dirty_ratio=values["min.cleanable.dirty.ratio"],
        delete_retention_ms=values["delete.retention.ms"],
        min_compaction_lag_ms=values["min.compaction.lag.ms"],
        delete="delete" in policy,
        min_insync_replicas=values["min.insync.replicas"],
        unclean_leader_election_enable=values["unclean.leader.election.enable"],
    )


__all__ = [
    "DYNAMIC_LOG_CONFIGS",
    "TOPIC_CONFIG",
    "ConfigSource",
    "DescribedConfig",
    "describe",
    "log_config",
    "resolve",
]
_ = ConfigType
