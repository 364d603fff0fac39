"""A Spark task's read: the records [start, end) of one topic partition, as Arrow
record batches in the source's schema.

The consumer is created in the task (readers are pickled to the workers) and
closed when the task ends. The only per-record Python work is what the client's
API forces: one call per field of each message, made through `map` so that the
loop itself runs in C.
"""

from __future__ import annotations

import bisect
import logging
import operator
import time
import uuid
from collections.abc import Iterator, Mapping

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from moldau.spark.offsets import OffsetRange, report_data_loss, report_out_of_range
from moldau.spark.schema import arrow_schema

log = logging.getLogger(__name__)

#: Messages taken from the client per call, and so the most rows in one batch:
#: 20,000 read fastest (bench/spark.py; 8,192 gave half the rate).
_BATCH = 20_000
#: One wait for messages (s): short, so that a stalled read notices its deadline.
_POLL_S = 0.5

#: The consumer settings a task's read starts from; `kafka.*` options override them.
#: Large fetches and a deep prefetch queue keep the client's fetcher ahead of the
#: task (measured in bench/spark.py); no group: a task reads by assignment only.
CONSUMER_DEFAULTS = {
    "enable.auto.commit": "false",
    "enable.auto.offset.store": "false",
    "enable.partition.eof": "true",
    "auto.offset.reset": "error",
    "fetch.message.max.bytes": str(4 * 1024 * 1024),
    "queued.min.messages": "1000000",
}


_FIRST, _SECOND = operator.itemgetter(0), operator.itemgetter(1)

#: Errors that mean the partition is gone: its topic was deleted.
_GONE = frozenset(
    {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC}
)


def consumer_config(client_config: Mapping[str, str]) -> dict[str, str]:
    config = {**CONSUMER_DEFAULTS, **client_config}
    # librdkafka wants a group id even to read by assignment; this one never joins.
    config.setdefault("group.id", f"moldau-spark-{uuid.uuid4().hex}")
    # Settings the reader depends on are not the user's to change.
    config.update(
        {
            "enable.auto.commit": "false",
            "enable.partition.eof": "true",
            "auto.offset.reset": "error",
        }
    )
    return config


def read_range(
    client_config: Mapping[str, str],
    r: OffsetRange,
    *,
    include_headers: bool,
    fail_on_data_loss: bool,
    poll_timeout_ms: int,
) -> Iterator[pa.RecordBatch]:
    consumer = Consumer(consumer_config(client_config))
    try:
        yield from _read(consumer, r, include_headers, fail_on_data_loss, poll_timeout_ms)
    finally:
        consumer.close()


def _read(
    consumer: Consumer,
    r: OffsetRange,
    include_headers: bool,
    fail_on_data_loss: bool,
    poll_timeout_ms: int,
) -> Iterator[pa.RecordBatch]:
    schema = arrow_schema(include_headers)
    position = r.start  # the next offset this task wants
    consumer.assign([TopicPartition(r.topic, r.partition, position)])
    deadline = time.monotonic() + poll_timeout_ms / 1000
    while position < r.end:
        messages = consumer.consume(_BATCH, _POLL_S)
        if not messages:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"Cannot fetch offset {position} of {r.topic}-{r.partition} "
                    f"within kafkaConsumer.pollTimeoutMs ({poll_timeout_ms} ms)"
                )
            continue
        deadline = time.monotonic() + poll_timeout_ms / 1000
        log_end = -1
        errors = list(map(Message.error, messages))
        if any(errors):
            events = [m for m, e in zip(messages, errors, strict=True) if e is not None]
            messages = [m for m, e in zip(messages, errors, strict=True) if e is None]
            for event in events:
                err = event.error()
                assert err is not None
                if err.code() == KafkaError._PARTITION_EOF:
                    # The end of the log. A range may end in records that compaction
                    # removed: then this is how the task knows it has all there is.
                    log_end = max(log_end, event.offset() or 0)
                    continue
                resume = _on_error(consumer, r, position, err, fail_on_data_loss)
                if resume is not None:
                    if resume >= r.end:
                        return
                    position = resume
                    consumer.assign([TopicPartition(r.topic, r.partition, position)])
                    messages = []
                    break
        if messages:
            offsets: list[int] = list(map(Message.offset, messages))  # type: ignore[arg-type]
            cut = bisect.bisect_left(offsets, r.end)
            if cut < len(messages):
                messages, offsets = messages[:cut], offsets[:cut]
                log_end = r.end  # past the range: nothing more to wait for
            if messages:
                yield _to_batch(messages, offsets, r, schema, include_headers)
                position = offsets[-1] + 1
        if log_end >= r.end:
            return


def _on_error(
    consumer: Consumer,
    r: OffsetRange,
    position: int,
    err: KafkaError,
    fail_on_data_loss: bool,
) -> int | None:
    """Deal with an error event of the client. Returns the offset to go on from
    when records of the range are gone (and failOnDataLoss is false), or None to
    keep reading."""
    if err.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
        low, high = consumer.get_watermark_offsets(
            TopicPartition(r.topic, r.partition), timeout=30, cached=False
        )
        return report_out_of_range(
            r.topic, r.partition, position, r.end, low, high, fail_on_data_loss
        )
    if err.code() in _GONE and _is_gone(consumer, r):
        report_data_loss(
            f"Cannot fetch offset {position} of {r.topic}-{r.partition}: {err.str()}",
            fail_on_data_loss,
        )
        return r.end
    if err.fatal():
        raise RuntimeError(f"reading {r.topic}-{r.partition}: {err.str()}")
    # A broker gone or a leader moving: the client recovers by itself, and a read
    # that stalls for good ends at kafkaConsumer.pollTimeoutMs.
    log.warning("reading %s-%s: %s (the client retries)", r.topic, r.partition, err.str())
    return None


def _is_gone(consumer: Consumer, r: OffsetRange) -> bool:
    """Whether the cluster no longer has the partition (its topic deleted), as
    opposed to one broker not knowing of it yet."""
    topics = consumer.list_topics(timeout=30).topics
    topic = topics.get(r.topic)
    return topic is None or r.partition not in topic.partitions


def _to_batch(
    messages: list[Message],
    offsets: list[int],
    r: OffsetRange,
    schema: pa.Schema,
    include_headers: bool,
) -> pa.RecordBatch:
    n = len(messages)
    stamps = list(map(Message.timestamp, messages))  # (type, ms) pairs
    # librdkafka's timestamp types are 0 (none: message format v0), 1 (CreateTime) and
    # 2 (LogAppendTime); Kafka's ids, which Spark shows, are -1, 0 and 1.
    types = pc.subtract(pa.array(list(map(_FIRST, stamps)), pa.int32()), pa.scalar(1, pa.int32()))
    # Without one librdkafka says 0 ms; Kafka's consumer says -1 (NO_TIMESTAMP), which
    # Spark's connector shows as such.
    ms = pc.if_else(
        pc.equal(types, -1),
        pa.scalar(-1, pa.int64()),
        pa.array(list(map(_SECOND, stamps)), pa.int64()),
    )
    columns = [
        pa.array(list(map(Message.key, messages)), pa.binary()),
        pa.array(list(map(Message.value, messages)), pa.binary()),
        pa.repeat(pa.scalar(r.topic, pa.string()), n),
        pa.repeat(pa.scalar(r.partition, pa.int32()), n),
        pa.array(offsets, pa.int64()),
        # librdkafka gives ms; Spark's timestamps are µs.
        pc.multiply(ms, 1000).view(schema.field("timestamp").type),
        types,
    ]
    if include_headers:
        columns.append(pa.array(list(map(Message.headers, messages)), schema.field("headers").type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)
