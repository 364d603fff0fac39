"""A Spark task's write: the rows of its Arrow batches produced as records.

Columns as Spark's Kafka sink takes them: `value` (string or binary, required),
`key` (string or binary), `topic` (string; the `topic` option wins over it),
`partition` (int) and `headers` (array<struct<key string, value binary>>).

The producer is idempotent (no duplicate from its own retries) and is created in
the task, flushed and dropped when the task ends; a record that could not be
written fails the task. That gives at-least-once: a task Spark runs again writes
its rows again (`exactlyOnce=true` writes in transactions instead: exactly_once.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from itertools import repeat
from typing import Any

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException, Producer
from pyspark.sql.types import BinaryType, DataType, IntegerType, StringType, StructType

from moldau.spark.options import InvalidOptionError, WriteOptions
from moldau.spark.schema import HEADERS_TYPE

#: Spark's connector's message for a row with no topic to go to.
NULL_TOPIC = "null topic present in the data. Use the topic option for setting a topic."


def row_topics(batch: pa.RecordBatch) -> pa.Array:
    """The batch's `topic` column; a null in it fails the task, as in Spark. (Here,
    not in batch_writer: the driver imports this module, and not the wire protocol.)"""
    topics = batch.column("topic")
    if topics.null_count:
        raise ValueError(NULL_TOPIC)
    return topics


#: Producer settings a task's write starts from; `kafka.*` options override them.
PRODUCER_DEFAULTS: dict[str, Any] = {
    "enable.idempotence": "true",
    "acks": "all",
    "linger.ms": "20",
    # Kafka's Java producer's, and so Spark's connector's: a key goes to the partition
    # of murmur2 of it (librdkafka's own default hashes with CRC32), so rows land where
    # other Java writers of the topic put their keys.
    "partitioner": "murmur2_random",
    "queue.buffering.max.messages": "1000000",
    # Only failures come back: a delivery callback per record would cost a Python
    # call per record.
    "delivery.report.only.error": True,
}

_KEY_VALUE_TYPES = (StringType(), BinaryType())


@dataclass(frozen=True)
class WriteColumns:
    """Which of the sink's columns a DataFrame has (checked on the driver)."""

    key: bool
    topic: bool
    partition: bool
    headers: bool


def check_write_schema(schema: StructType, options: WriteOptions) -> WriteColumns:
    types: dict[str, DataType] = {f.name: f.dataType for f in schema.fields}

    def check(name: str, allowed: tuple[DataType, ...], what: str) -> bool:
        if name not in types:
            return False
        # By type alone: a headers column Spark SQL made (array(named_struct(...)))
        # has non-null keys and entries, which DataType equality tells apart.
        if types[name].simpleString() not in {t.simpleString() for t in allowed}:
            raise InvalidOptionError(
                f"{name} attribute type must be {what}, not {types[name].simpleString()}"
            )
        return True

    if "value" not in types:
        raise InvalidOptionError("Required attribute 'value' not found")
    check("value", _KEY_VALUE_TYPES, "a string or binary")
    columns = WriteColumns(
        key=check("key", _KEY_VALUE_TYPES, "a string or binary"),
        topic=check("topic", (StringType(),), "a string"),
        partition=check("partition", (IntegerType(),), "an int"),
        headers=check("headers", (HEADERS_TYPE,), "array<struct<key:string,value:binary>>"),
    )
    if options.topic is None and not columns.topic:
        raise InvalidOptionError(
            "topic option required when no 'topic' attribute is present. Use the topic "
            "option for setting a topic."
        )
    return columns


#: Kafka's levels of a codec (the batch path's names, as Spark's connector takes
#: them); librdkafka has one `compression.level` instead.
_CODEC_LEVELS = ("compression.gzip.level", "compression.lz4.level", "compression.zstd.level")


def producer_config(client_config: Mapping[str, str]) -> dict[str, Any]:
    config = {**PRODUCER_DEFAULTS, **client_config}
    codec = config.get("compression.type") or config.get("compression.codec") or "none"
    for key in _CODEC_LEVELS:
        level = config.pop(key, None)
        if level is not None and key == f"compression.{codec.strip().lower()}.level":
            config.setdefault("compression.level", level)
    return config


class RecordWriter:
    """Produces rows; `close()` flushes and raises the first delivery failure."""

    def __init__(
        self,
        options: WriteOptions,
        columns: WriteColumns,
        extra_config: Mapping[str, Any] | None = None,
    ) -> None:
        """`extra_config`: producer settings over the options' (a transactional id)."""
        self._options = options
        self._columns = columns
        # The delivery callback holds the failures list, not the writer: a bound
        # method would make writer and producer a cycle, and the producer (its
        # threads and connections) would outlive the task until a garbage collection.
        failures: list[KafkaError] = []
        self._failures = failures

        def on_delivery(err: KafkaError | None, _msg: object) -> None:
            if err is not None and not failures:
                failures.append(err)

        self.producer = Producer(
            {
                **producer_config(options.client_config),
                **(extra_config or {}),
                "on_delivery": on_delivery,
            }
        )
        self.count = 0

    @property
    def _failure(self) -> KafkaError | None:
        return self._failures[0] if self._failures else None

    def write(self, batch: pa.RecordBatch) -> None:
        if self._failure is not None:
            raise KafkaException(self._failure)
        n = batch.num_rows
        cols = self._columns
        produce = self.producer.produce
        values = batch.column("value").to_pylist()
        keys = batch.column("key").to_pylist() if cols.key else repeat(None, n)
        topics: Any = (
            repeat(self._options.topic, n)
            if self._options.topic is not None
            else row_topics(batch).to_pylist()
        )
        if not cols.partition and not cols.headers:
            for topic, value, key in zip(topics, values, keys, strict=False):
                try:
                    produce(topic, value, key)
                except BufferError:
                    self._produce_when_room(topic, value, key)
        else:
            partitions = batch.column("partition").to_pylist() if cols.partition else repeat(-1, n)
            headers = batch.column("headers").to_pylist() if cols.headers else repeat(None, n)
            rows = zip(topics, values, keys, partitions, headers, strict=False)
            for topic, value, key, partition, hs in rows:
                kwargs: dict[str, Any] = {"partition": -1 if partition is None else partition}
                if hs:
                    kwargs["headers"] = [(h["key"], h["value"]) for h in hs]
                try:
                    produce(topic, value, key, **kwargs)
                except BufferError:
                    self._produce_when_room(topic, value, key, **kwargs)
        self.count += n
        self.producer.poll(0)

    def _produce_when_room(self, *args: Any, **kwargs: Any) -> None:
        # The client's queue is full: let deliveries drain it, then try again.
        while True:
            self.producer.poll(0.1)
            try:
                self.producer.produce(*args, **kwargs)
                return
            except BufferError:
                continue

    def flush(self, timeout_s: float = 300.0) -> None:
        """Wait for every record's delivery; raise the first failure."""
        try:
            left = self.producer.flush(timeout_s)
        except SystemError as e:
            # confluent-kafka calls the delivery callback with a fatal error (a fenced
            # transactional producer) still pending, and Python reports that as a
            # SystemError, with the client's error as its cause or, depending on
            # timing, with none: the client's error is the one to raise.
            if isinstance(e.__cause__, KafkaException):
                raise e.__cause__ from None
            if self._failure is not None:
                raise KafkaException(self._failure) from None
            raise KafkaException(KafkaError(KafkaError._FATAL, f"flush failed: {e}")) from None
        if self._failure is not None:
            raise KafkaException(self._failure)
        if left:
            raise TimeoutError(f"{left} records were not delivered within {timeout_s:.0f} s")

    close = flush


def out_rows(batch: pa.RecordBatch, options: WriteOptions, columns: WriteColumns) -> list[Any]:
    """The rows of a batch as (topic, partition or -1, key, value, headers)."""
    n = batch.num_rows
    values = batch.column("value").to_pylist()
    keys = batch.column("key").to_pylist() if columns.key else repeat(None, n)
    topics: Any = (
        repeat(options.topic, n) if options.topic is not None else batch.column("topic").to_pylist()
    )
    partitions = batch.column("partition").to_pylist() if columns.partition else repeat(-1, n)
    headers = batch.column("headers").to_pylist() if columns.headers else repeat(None, n)
    return [
        (
            topic,
            -1 if partition is None else partition,
            key,
            value,
            tuple((h["key"], h["value"]) for h in hs or ()),
        )
        for topic, partition, key, value, hs in zip(
            topics, partitions, keys, values, headers, strict=False
        )
    ]


def write_batches(
    options: WriteOptions, columns: WriteColumns, batches: Iterator[pa.RecordBatch]
) -> int:
    writer = RecordWriter(options, columns)
    for batch in batches:
        writer.write(batch)
    writer.close()
    return writer.count
