"""Exactly-once writes (`exactlyOnce=true`), on Kafka transactions, from the tasks.

Spark runs a task again when it fails (also after its write, before Spark heard of
it), runs a speculative copy of a slow one, and replays a whole micro-batch after a
restart, with the same input. Each task therefore writes its rows in one
transaction of its own transactional id, derived from the query and the task's
sink's topic and the task's partition, so that every attempt at the same slot has
the same id:

1. `init_transactions` fences every earlier attempt at this slot (its producer can
   no longer write or commit) and aborts its open transaction;
2. the slot's bookkeeping is read: an offset the group `<transactional id>` commits
   on partition 0 of the marker topic, the number of the last batch written plus
   one. If this batch is written already, the task writes nothing;
3. otherwise it begins a transaction, produces its rows, commits that offset in the
   same transaction (`send_offsets_to_transaction`), and commits.

Rows and bookkeeping are committed together or not at all, so a batch is written
once whatever fails. A speculative copy running at the same time is fenced by the
same id: whichever initialises last writes (unless the other already committed).
Readers see only committed rows with isolation.level=read_committed.

The bookkeeping is a committed offset rather than a record of a topic of its own so
that a task finds it with one OffsetFetch (KIP-447's require_stable waits out a
commit still being completed), not by scanning a topic that grows with every batch.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

# confluent_kafka.admin re-exports these without an __all__ (see cli/topics.py).
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from moldau.spark.options import WriteOptions
from moldau.spark.writer import RecordWriter, WriteColumns

#: How long a task's transaction may stay open (Kafka's transaction.max.timeout.ms
#: default): a task writes for up to this long before the coordinator aborts it.
TRANSACTION_TIMEOUT_MS = 900_000


@dataclass(frozen=True)
class TaskSlot:
    """Where a task writes: the same for every attempt at it."""

    query_id: str
    sink: str
    batch_id: int
    partition_id: int

    @property
    def transactional_id(self) -> str:
        return f"moldau-spark-{self.query_id}-{self.sink}-{self.partition_id}"


def new_batch_query_id() -> str:
    """A batch write's own id: its tasks' retries share it, another write does not."""
    return f"batch-{uuid.uuid4()}"


def ensure_marker_topic(client_config: Mapping[str, str], topic: str, timeout_s: float) -> None:
    """The topic whose partition 0 the bookkeeping offsets are committed on."""
    admin = AdminClient(dict(client_config))
    new = NewTopic(topic, 1, -1, config={"cleanup.policy": "compact"})
    try:
        admin.create_topics([new])[topic].result(timeout_s)
    except KafkaException as e:
        if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise


def write_in_transaction(
    options: WriteOptions,
    columns: WriteColumns,
    slot: TaskSlot,
    batches: Iterator[pa.RecordBatch],
    timeout_s: float = 120.0,
) -> int:
    """The task's rows, once for its slot; returns how many it wrote (0 if an earlier
    attempt at the slot already committed them)."""
    config = options.client_config
    txn_id = slot.transactional_id
    writer = RecordWriter(
        options,
        columns,
        {"transactional.id": txn_id, "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS},
    )
    producer = writer.producer
    # Fences earlier attempts and aborts what they left open.
    producer.init_transactions(timeout_s)
    bookkeeping = Consumer(
        {
            **config,
            "group.id": txn_id,
            "enable.auto.commit": False,
            # Waits until a transaction that committed the slot's offset has ended.
            "isolation.level": "read_committed",
        }
    )
    try:
        marker = TopicPartition(options.marker_topic, 0)
        [committed] = bookkeeping.committed([marker], timeout=timeout_s)
        if committed.error is not None:
            raise KafkaException(committed.error)
        if committed.offset > slot.batch_id:
            return 0  # this batch's rows are in already
        producer.begin_transaction()
        try:
            for batch in batches:
                writer.write(batch)
            writer.flush(timeout_s)
            producer.send_offsets_to_transaction(
                [TopicPartition(options.marker_topic, 0, slot.batch_id + 1)],
                bookkeeping.consumer_group_metadata(),
                timeout_s,
            )
            producer.commit_transaction(timeout_s)
        except BaseException:
            _abort_quietly(producer, timeout_s)
            raise
        return writer.count
    finally:
        bookkeeping.close()


def _abort_quietly(producer: Producer, timeout_s: float) -> None:
    """Abort after a failure; if the producer was fenced meanwhile there is nothing
    of ours to abort (the attempt that fenced it aborted it)."""
    with contextlib.suppress(KafkaException):
        producer.abort_transaction(timeout_s)


def slot_of_task(options: WriteOptions, default_query_id: str | None) -> TaskSlot:
    """The running task's slot: its query and micro-batch from the local properties
    Spark sets for streaming tasks, also those of the jobs a foreachBatch function
    starts (a batch write elsewhere passes its own id, batch 0)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        raise RuntimeError("exactlyOnce writes run in Spark tasks")
    query_id = context.getLocalProperty("sql.streaming.queryId") or default_query_id
    batch = context.getLocalProperty("streaming.sql.batchId")
    if not query_id:
        raise RuntimeError("no query id for this exactlyOnce write")
    sink = options.topic or "topic-column"
    return TaskSlot(query_id, sink, int(batch) if batch else 0, context.partitionId())
