"""The data source's options: Spark's Kafka connector's names and rules, parsed and
checked on the driver before any task runs (pure functions, no pyspark).

Option names are case-insensitive, as in Spark. `kafka.*` options go to the Kafka
client with the prefix dropped. A mistake raises InvalidOptionError naming the
option, at once, as Spark's connector does; an option neither Spark nor Moldau
knows is a mistake too (Spark would ignore it silently).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

#: Kafka's special offsets in Spark's offset JSON.
EARLIEST = -2
LATEST = -1

TopicPartitionKey = tuple[str, int]


class InvalidOptionError(ValueError):
    """A data source option that is unknown, malformed or contradicts another."""


@dataclass(frozen=True)
class Subscription:
    """What to read: `subscribe` (topics), `subscribePattern` (a regex matched
    against whole topic names) or `assign` (topic partitions)."""

    kind: Literal["subscribe", "subscribePattern", "assign"]
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    partitions: tuple[TopicPartitionKey, ...] = ()

    def matches(self, topic: str) -> bool:
        if self.kind == "subscribe":
            return topic in self.topics
        if self.kind == "subscribePattern":
            assert self.pattern is not None
            return re.fullmatch(self.pattern, topic) is not None
        return any(t == topic for t, _ in self.partitions)

    def describe(self) -> str:
        """The option that set it, as the user wrote it."""
        if self.kind == "subscribe":
            return f"subscribe={','.join(self.topics)}"
        if self.kind == "subscribePattern":
            return f"subscribePattern={self.pattern}"
        return f"assign={','.join(sorted({t for t, _ in self.partitions}))} (partitions)"


@dataclass(frozen=True)
class OffsetSpec:
    """Where a read starts or ends, before it is resolved against the log.

    kind "earliest" / "latest": every partition. "offsets": per partition, with
    -2 for earliest and -1 for latest; partitions not named take `default`.
    "timestamps": per partition, the first offset whose timestamp is at or after
    it. "timestamp": one timestamp for every partition.
    """

    kind: Literal["earliest", "latest", "offsets", "timestamps", "timestamp"]
    offsets: Mapping[TopicPartitionKey, int] = field(default_factory=dict)
    timestamp: int | None = None


@dataclass(frozen=True)
class ReadOptions:
    client_config: Mapping[str, str]
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    #: With `startingOffsetsByTimestamp`/`startingTimestamp`: what a partition
    #: with no record at or after the timestamp does: "error" or "latest".
    timestamp_strategy: Literal["error", "latest"] = "error"
    max_offsets_per_trigger: int | None = None
    #: A soft cap on the bytes a micro-batch reads, as the log stores them (the
    #: name of Spark's file and Delta sources' option; Spark's Kafka connector has
    #: none): moldau.spark.offsets.byte_limit.
    max_bytes_per_trigger: int | None = None
    min_partitions: int | None = None
    #: A task reads at most this many offsets: a partition's range is split.
    max_records_per_partition: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    poll_timeout_ms: int = 120_000
    fetch_offset_retries: int = 3
    fetch_offset_retry_interval_ms: int = 1000
    #: Moldau's own: a consumer group the streaming query commits its progress to.
    commit_to_group: str | None = None
    #: Moldau's own: "fetch" (tasks fetch record batches themselves, the default) or
    #: "client" (through confluent-kafka); see moldau.spark.read_path.
    fetch_path: Literal["fetch", "client"] = "fetch"


@dataclass(frozen=True)
class WriteOptions:
    client_config: Mapping[str, str]
    topic: str | None = None
    #: Write each task's rows in a transaction, once (moldau.spark.exactly_once).
    exactly_once: bool = False
    marker_topic: str = "_moldau_spark_batches"
    #: Moldau's own: "batch" (tasks build record batches and produce them, the
    #: default) or "client" (through confluent-kafka); see moldau.spark.write_path.
    write_path: Literal["batch", "client"] = "batch"


_READ_OPTIONS = {
    "subscribe",
    "subscribepattern",
    "assign",
    "startingoffsets",
    "endingoffsets",
    "startingtimestamp",
    "endingtimestamp",
    "startingoffsetsbytimestamp",
    "endingoffsetsbytimestamp",
    "startingoffsetsbytimestampstrategy",
    "maxoffsetspertrigger",
    "maxbytespertrigger",
    "minpartitions",
    "maxrecordsperpartition",
    "failondataloss",
    "includeheaders",
    "kafkaconsumer.polltimeoutms",
    "fetchoffset.numretries",
    "fetchoffset.retryintervalms",
    "committogroup",
    "fetchpath",
}
_WRITE_OPTIONS = {"topic", "exactlyonce", "exactlyonce.markertopic", "writepath"}
#: Options Spark itself adds or reads, which reach every data source.
_SPARKS_OWN = {"path", "checkpointlocation"}

#: Client settings the data source owns (as Spark's connector refuses them),
#: with what to do instead.
_UNSUPPORTED_CONSUMER = {
    "group.id": "the data source reads without a consumer group; to see a streaming "
    "query's progress as a group's lag, set the option 'commitToGroup'",
    "auto.offset.reset": "set the source option 'startingOffsets' instead",
    "key.deserializer": "keys are read as bytes; deserialize them with DataFrame operations",
    "value.deserializer": "values are read as bytes; deserialize them with DataFrame operations",
    "enable.auto.commit": "the data source does not commit offsets; Spark checkpoints them",
    "interceptor.classes": "interceptors are not supported",
}
_UNSUPPORTED_PRODUCER = {
    "key.serializer": "keys are written as bytes or UTF-8 strings; serialize them with "
    "DataFrame operations",
    "value.serializer": "values are written as bytes or UTF-8 strings; serialize them with "
    "DataFrame operations",
    "interceptor.classes": "interceptors are not supported",
}


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in options.items() if v is not None}


#: librdkafka writes its informational lines (level 6) straight to stderr, where a
#: Spark user reads them as trouble ("Purging 1 unserved events..."). Warnings and
#: errors still show, as with Spark's own default log level; `kafka.log_level`
#: overrides it.
_CLIENT_LOG_LEVEL = "4"


def _client_config(opts: Mapping[str, str], refused: Mapping[str, str]) -> dict[str, str]:
    config = {"log_level": _CLIENT_LOG_LEVEL}
    config.update((k[len("kafka.") :], v) for k, v in opts.items() if k.startswith("kafka."))
    for key in config:
        if key in refused:
            raise InvalidOptionError(f"Kafka option 'kafka.{key}' is not supported: {refused[key]}")
    if not config.get("bootstrap.servers"):
        raise InvalidOptionError(
            "Option 'kafka.bootstrap.servers' must be specified for configuring Kafka consumer"
            if refused is _UNSUPPORTED_CONSUMER
            else "Option 'kafka.bootstrap.servers' must be specified for configuring Kafka producer"
        )
    return config


def _check_known(opts: Mapping[str, str], known: set[str], what: str) -> None:
    for key in opts:
        if key not in known and not key.startswith("kafka.") and key not in _SPARKS_OWN:
            raise InvalidOptionError(f"Unknown option '{key}' for the moldau {what}")


def _bool(opts: Mapping[str, str], key: str, default: bool) -> bool:
    raw = opts.get(key)
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise InvalidOptionError(f"Option '{key}' must be true or false, not {raw!r}")


def _positive_int(opts: Mapping[str, str], key: str, name: str) -> int | None:
    raw = opts.get(key)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise InvalidOptionError(
            f"Option '{name}' must be a positive integer, not {raw!r}"
        ) from None
    if value <= 0:
        raise InvalidOptionError(f"Option '{name}' must be a positive integer, not {raw!r}")
    return value


def _count(opts: Mapping[str, str], key: str, name: str, default: int) -> int:
    raw = opts.get(key)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise InvalidOptionError(f"Option '{name}' must be a non-negative integer, not {raw!r}")
    return value


def _json(raw: str, name: str) -> object:
    try:
        return json.loads(raw)
    except json.JSONDecodeError as e:
        raise InvalidOptionError(f"Option '{name}' is not valid JSON ({e.msg}): {raw!r}") from None


def _per_partition(raw: str, name: str) -> dict[TopicPartitionKey, int]:
    """`{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}` as Spark's JsonUtils reads it."""
    parsed = _json(raw, name)
    out: dict[TopicPartitionKey, int] = {}
    if not isinstance(parsed, dict):
        raise InvalidOptionError(
            f'Option \'{name}\' must be JSON like {{"topicA":{{"0":23,"1":-1}}}}, not {raw!r}'
        )
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict):
            raise InvalidOptionError(
                f"Option '{name}': topic {topic!r} must map partitions to offsets, not {raw!r}"
            )
        for partition, value in partitions.items():
            try:
                p = int(partition)
            except ValueError:
                raise InvalidOptionError(
                    f"Option '{name}': {partition!r} of topic {topic!r} is not a partition number"
                ) from None
            if not isinstance(value, int) or isinstance(value, bool):
                raise InvalidOptionError(
                    f"Option '{name}': the value for {topic}-{p} must be an integer, not {value!r}"
                )
            out[(topic, p)] = value
    return out


def _subscription(opts: Mapping[str, str]) -> Subscription:
    given = [k for k in ("subscribe", "subscribepattern", "assign") if k in opts]
    if len(given) > 1:
        names = ", ".join({"subscribepattern": "subscribePattern"}.get(k, k) for k in given)
        raise InvalidOptionError(
            "Only one of the following options can be specified for Kafka source: subscribe, "
            f"subscribePattern, assign (given: {names})"
        )
    if not given:
        raise InvalidOptionError(
            "One of the following options must be specified for Kafka source: subscribe, "
            "subscribePattern, assign"
        )
    key = given[0]
    raw = opts[key]
    if key == "subscribe":
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not topics:
            raise InvalidOptionError(f"No topics to subscribe to in option 'subscribe': {raw!r}")
        return Subscription("subscribe", topics=topics)
    if key == "subscribepattern":
        if not raw.strip():
            raise InvalidOptionError("Pattern to subscribe is empty in option 'subscribePattern'")
        try:
            re.compile(raw)
        except re.error as e:
            raise InvalidOptionError(
                f"Option 'subscribePattern' is not a valid regex: {e}"
            ) from None
        return Subscription("subscribePattern", pattern=raw)
    parsed = _json(raw, "assign")
    if not isinstance(parsed, dict) or not all(
        isinstance(ps, list) and all(isinstance(p, int) and not isinstance(p, bool) for p in ps)
        for ps in parsed.values()
    ):
        raise InvalidOptionError(
            f'Option \'assign\' must be JSON like {{"topicA":[0,1],"topicB":[2]}}, not {raw!r}'
        )
    partitions = tuple(sorted((t, p) for t, ps in parsed.items() for p in ps))
    if not partitions:
        raise InvalidOptionError(f"No topic partitions to assign in option 'assign': {raw!r}")
    return Subscription("assign", partitions=partitions)


def _offset_spec(opts: Mapping[str, str], side: Literal["starting", "ending"]) -> OffsetSpec | None:
    """The one of `{side}Offsets`, `{side}OffsetsByTimestamp`, `{side}Timestamp` given.

    As in Spark, a global timestamp wins over per-partition timestamps, which win
    over offsets."""
    ts_key, by_ts_key, offsets_key = (
        f"{side}timestamp",
        f"{side}offsetsbytimestamp",
        f"{side}offsets",
    )
    if ts_key in opts:
        raw = opts[ts_key]
        try:
            return OffsetSpec("timestamp", timestamp=int(raw))
        except ValueError:
            raise InvalidOptionError(
                f"Option '{side}Timestamp' must be a timestamp in ms, not {raw!r}"
            ) from None
    if by_ts_key in opts:
        return OffsetSpec(
            "timestamps", offsets=_per_partition(opts[by_ts_key], f"{side}OffsetsByTimestamp")
        )
    if offsets_key in opts:
        raw = opts[offsets_key].strip()
        if raw.lower() in ("earliest", "latest"):
            return OffsetSpec(raw.lower())  # type: ignore[arg-type]
        offsets = _per_partition(raw, f"{side}Offsets")
        for (t, p), o in offsets.items():
            if o < EARLIEST:
                raise InvalidOptionError(
                    f"Option '{side}Offsets': offset {o} for {t}-{p} is not an offset, "
                    "-2 (earliest) or -1 (latest)"
                )
        return OffsetSpec("offsets", offsets=offsets)
    return None


def _check_assigned(spec: OffsetSpec, subscription: Subscription, name: str) -> None:
    """With `assign`, per-partition offsets must name exactly the assigned partitions."""
    if subscription.kind != "assign" or spec.kind not in ("offsets", "timestamps"):
        return
    if set(spec.offsets) != set(subscription.partitions):
        raise InvalidOptionError(
            f"Option '{name}' names partitions {sorted(spec.offsets)} but 'assign' names "
            f"{sorted(subscription.partitions)}"
        )


def parse_read_options(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    opts = _lower(options)
    _check_known(opts, _READ_OPTIONS, "source")
    client_config = _client_config(opts, _UNSUPPORTED_CONSUMER)
    subscription = _subscription(opts)

    starting = _offset_spec(opts, "starting")
    ending = _offset_spec(opts, "ending")
    if streaming:
        for key, name in (
            ("endingoffsets", "endingOffsets"),
            ("endingoffsetsbytimestamp", "endingOffsetsByTimestamp"),
            ("endingtimestamp", "endingTimestamp"),
        ):
            if key in opts:
                raise InvalidOptionError(f"Option '{name}' is not valid for streaming queries")
        starting = starting or OffsetSpec("latest")
        ending = OffsetSpec("latest")
    else:
        starting = starting or OffsetSpec("earliest")
        ending = ending or OffsetSpec("latest")
        if starting.kind == "latest":
            raise InvalidOptionError(
                "Option 'startingOffsets' for batch queries cannot be latest; use earliest "
                "or offsets"
            )
        if ending.kind == "earliest":
            raise InvalidOptionError(
                "Option 'endingOffsets' for batch queries cannot be earliest; use latest or offsets"
            )
        for (t, p), o in starting.offsets.items():
            if starting.kind == "offsets" and o == LATEST:
                raise InvalidOptionError(
                    f"Option 'startingOffsets' for batch queries: latest (-1) is not allowed "
                    f"for {t}-{p}"
                )
        for (t, p), o in ending.offsets.items():
            if ending.kind == "offsets" and o == EARLIEST:
                raise InvalidOptionError(
                    f"Option 'endingOffsets' for batch queries: earliest (-2) is not allowed "
                    f"for {t}-{p}"
                )
    _check_assigned(starting, subscription, "startingOffsets")
    _check_assigned(ending, subscription, "endingOffsets")

    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise InvalidOptionError(
            "Option 'startingOffsetsByTimestampStrategy' must be error or latest, "
            f"not {opts['startingoffsetsbytimestampstrategy']!r}"
        )
    max_per_trigger = _positive_int(opts, "maxoffsetspertrigger", "maxOffsetsPerTrigger")
    if max_per_trigger is not None and not streaming:
        raise InvalidOptionError(
            "Option 'maxOffsetsPerTrigger' is only valid for streaming queries"
        )
    max_bytes = _positive_int(opts, "maxbytespertrigger", "maxBytesPerTrigger")
    if max_bytes is not None and not streaming:
        raise InvalidOptionError("Option 'maxBytesPerTrigger' is only valid for streaming queries")
    commit_to_group = opts.get("committogroup")
    if commit_to_group is not None and not streaming:
        raise InvalidOptionError("Option 'commitToGroup' is only valid for streaming queries")
    if commit_to_group is not None and not commit_to_group.strip():
        raise InvalidOptionError("Option 'commitToGroup' must name a consumer group")
    fetch_path = opts.get("fetchpath", "fetch").strip().lower()
    if fetch_path not in ("fetch", "client"):
        raise InvalidOptionError(
            f"Option 'fetchPath' must be fetch or client, not {opts['fetchpath']!r}"
        )
    return ReadOptions(
        client_config=client_config,
        subscription=subscription,
        starting=starting,
        ending=ending,
        timestamp_strategy=strategy,  # type: ignore[arg-type]
        max_offsets_per_trigger=max_per_trigger,
        max_bytes_per_trigger=max_bytes,
        min_partitions=_positive_int(opts, "minpartitions", "minPartitions"),
        max_records_per_partition=_positive_int(
            opts, "maxrecordsperpartition", "maxRecordsPerPartition"
        ),
        fail_on_data_loss=_bool(opts, "failondataloss", True),
        include_headers=_bool(opts, "includeheaders", False),
        poll_timeout_ms=_positive_int(
            opts, "kafkaconsumer.polltimeoutms", "kafkaConsumer.pollTimeoutMs"
        )
        or 120_000,
        fetch_offset_retries=_count(opts, "fetchoffset.numretries", "fetchOffset.numRetries", 3),
        fetch_offset_retry_interval_ms=_count(
            opts, "fetchoffset.retryintervalms", "fetchOffset.retryIntervalMs", 1000
        ),
        commit_to_group=commit_to_group,
        fetch_path=fetch_path,  # type: ignore[arg-type]
    )


def parse_write_options(options: Mapping[str, str], *, streaming: bool) -> WriteOptions:
    opts = _lower(options)
    _check_known(opts, _WRITE_OPTIONS, "sink")
    client_config = _client_config(opts, _UNSUPPORTED_PRODUCER)
    topic = opts.get("topic")
    if topic is not None and not topic.strip():
        raise InvalidOptionError("Option 'topic' must name a topic")
    exactly_once = _bool(opts, "exactlyonce", False)
    if exactly_once and "transactional.id" in client_config:
        raise InvalidOptionError(
            "Option 'kafka.transactional.id' cannot be set with exactlyOnce: each task "
            "uses a transactional id of its own"
        )
    marker_topic = opts.get("exactlyonce.markertopic", "_moldau_spark_batches").strip()
    if not marker_topic:
        raise InvalidOptionError("Option 'exactlyOnce.markerTopic' must name a topic")
    write_path = opts.get("writepath", "batch").strip().lower()
    if write_path not in ("batch", "client"):
        raise InvalidOptionError(
            f"Option 'writePath' must be batch or client, not {opts['writepath']!r}"
        )
    return WriteOptions(
        client_config=client_config,
        topic=topic,
        exactly_once=exactly_once,
        marker_topic=marker_topic,
        write_path=write_path,  # type: ignore[arg-type]
    )
