"""The client path's rows (moldau.spark.reader) from confluent-kafka's messages, as
Spark's own Kafka connector shows them (no sockets)."""

from __future__ import annotations

from confluent_kafka import Message

from moldau.spark.offsets import OffsetRange
from moldau.spark.reader import _to_batch
from moldau.spark.schema import arrow_schema


def test_timestamps_and_their_types_are_kafkas_own() -> None:
    """librdkafka's types 0 (none, message format v0), 1 and 2 are Kafka's -1
    (NO_TIMESTAMP_TYPE), 0 (CreateTime) and 1 (LogAppendTime); a record without a
    timestamp has Kafka's NO_TIMESTAMP, -1 ms, where librdkafka says 0."""
    stamps = [(0, 0), (1, 1_700_000_000_123), (2, 1_700_000_000_456)]
    messages = [
        Message(topic="t", partition=0, offset=i, key=b"k", value=b"v", timestamp=s)
        for i, s in enumerate(stamps)
    ]
    batch = _to_batch(messages, [0, 1, 2], OffsetRange("t", 0, 0, 3), arrow_schema(False), False)
    assert batch.column("timestampType").to_pylist() == [-1, 0, 1]
    micros = batch.column("timestamp").cast("int64").to_pylist()
    assert micros == [-1000, 1_700_000_000_123_000, 1_700_000_000_456_000]
