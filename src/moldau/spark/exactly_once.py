"""Exactly-once output of streaming micro-batches (`exactlyOnce=true`).

Spark runs a micro-batch again after a failure: a task retried, or the whole batch
replayed after a restart, with the same input. Written straight from the tasks,
its records would be written again. Here the tasks only hand their rows to the
driver (in their commit messages); the driver publishes a batch once, in
`commit(batchId)`, and keeps a marker per query in a compacted topic:

1. `begin`, with the log end offsets of the output partitions, before the first
   record of the batch;
2. the records, each with a header `moldau.spark.batch` = `<query id>:<batch id>`;
3. `done`.

A batch whose marker says `done` is skipped. A batch whose marker says `begin` died
while publishing: the records it already wrote are found again between the offsets
of the `begin` marker and the log end, by their header, and only the missing ones
are written. So every row of every micro-batch lands once, as long as one query
writes with one checkpoint (Spark allows one run per checkpoint at a time).

The price: a micro-batch's rows travel through the driver, so this suits the
outputs of aggregations and other modest streams; big streams write at-least-once
from the tasks (the default).
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

# confluent_kafka.admin re-exports these without an __all__ (see cli/topics.py).
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from moldau.spark.metadata import OffsetReader
from moldau.spark.offsets import from_json, to_json
from moldau.spark.options import Subscription

BATCH_HEADER = "moldau.spark.batch"

#: (topic, partition or -1, key, value, headers): a row as the producer takes it.
OutRow = tuple[str, int, Any, Any, tuple[tuple[str, bytes | None], ...]]


@dataclass(frozen=True)
class Marker:
    batch: int
    state: Literal["begin", "done"]
    offsets: Mapping[str, Mapping[str, int]]

    def to_bytes(self) -> bytes:
        value = {"batch": self.batch, "state": self.state, "offsets": self.offsets}
        return json.dumps(value, sort_keys=True).encode()

    @staticmethod
    def from_bytes(raw: bytes) -> Marker:
        v = json.loads(raw)
        return Marker(int(v["batch"]), v["state"], v.get("offsets", {}))


def _identity(row: OutRow) -> tuple[Any, ...]:
    """What makes two records the same row; partition -1 means "the producer's
    choice", so it does not count."""
    topic, partition, key, value, headers = row
    as_bytes = [x.encode() if isinstance(x, str) else x for x in (key, value)]
    return (topic, partition if partition >= 0 else None, *as_bytes, headers)


class BatchPublisher:
    """Publishes micro-batches of one streaming query exactly once (on the driver)."""

    def __init__(
        self,
        client_config: Mapping[str, str],
        producer_config: Mapping[str, Any],
        query_id: str,
        marker_topic: str,
        timeout_s: float = 120.0,
    ) -> None:
        self._client_config = dict(client_config)
        self._producer_config = dict(producer_config)
        self.query_id = query_id
        self.marker_topic = marker_topic
        self._timeout_s = timeout_s

    # -- markers ------------------------------------------------------------------------

    def ensure_marker_topic(self) -> None:
        admin = AdminClient(dict(self._client_config))
        topic = NewTopic(self.marker_topic, 1, -1, config={"cleanup.policy": "compact"})
        try:
            admin.create_topics([topic])[self.marker_topic].result(self._timeout_s)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise

    def last_marker(self) -> Marker | None:
        found: Marker | None = None
        key = self.query_id.encode()
        for m in self._read(self.marker_topic, {0: 0}):
            if m.key() == key and m.value() is not None:
                found = Marker.from_bytes(m.value())
        return found

    def _write_marker(self, marker: Marker) -> None:
        self._send([(self.marker_topic, 0, self.query_id.encode(), marker.to_bytes(), ())])

    # -- records ------------------------------------------------------------------------

    def _send(self, rows: Iterable[OutRow], header: str | None = None) -> int:
        failures: list[KafkaError] = []

        def on_delivery(err: KafkaError | None, _msg: object) -> None:
            if err is not None:
                failures.append(err)

        producer = Producer({**self._producer_config, "on_delivery": on_delivery})
        sent = 0
        for topic, partition, key, value, headers in rows:
            hs: list[tuple[str, str | bytes | None]] = [*headers]
            if header:
                hs.append((BATCH_HEADER, header.encode()))
            while True:
                try:
                    producer.produce(topic, value, key, partition=partition, headers=hs or None)
                    break
                except BufferError:
                    producer.poll(0.1)
            sent += 1
        left = producer.flush(self._timeout_s)
        if failures:
            raise KafkaException(failures[0])
        if left:
            raise TimeoutError(f"{left} records not delivered in {self._timeout_s:.0f} s")
        return sent

    def _read(self, topic: str, start: Mapping[int, int]) -> Iterable[Any]:
        """Every record of `topic` from `start` (partition -> offset) to the log end."""
        consumer = Consumer(
            {
                **self._client_config,
                "group.id": f"moldau-spark-{uuid.uuid4().hex}",
                "enable.auto.commit": "false",
                "enable.partition.eof": "true",
            }
        )
        try:
            ends = {}
            for p, offset in start.items():
                _, high = consumer.get_watermark_offsets(
                    TopicPartition(topic, p), timeout=self._timeout_s, cached=False
                )
                if high > offset:
                    ends[p] = high
            if not ends:
                return
            consumer.assign([TopicPartition(topic, p, start[p]) for p in ends])
            deadline = time.monotonic() + self._timeout_s
            done: set[int] = set()
            while len(done) < len(ends):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"reading {topic} took over {self._timeout_s:.0f} s")
                for m in consumer.consume(10_000, 0.5):
                    err = m.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            if (m.offset() or 0) >= ends[m.partition() or 0]:
                                done.add(m.partition() or 0)
                            continue
                        if err.fatal():
                            raise KafkaException(err)
                        continue
                    yield m
                    if (m.offset() or 0) + 1 >= ends[m.partition() or 0]:
                        done.add(m.partition() or 0)
        finally:
            consumer.close()

    def _already_written(
        self, batch_id: int, since: Mapping[str, Mapping[str, int]]
    ) -> Counter[Any]:
        tag = f"{self.query_id}:{batch_id}".encode()
        written: Counter[Any] = Counter()
        for topic, partitions in from_json_by_topic(since).items():
            for m in self._read(topic, partitions):
                headers = m.headers() or []
                if (BATCH_HEADER, tag) not in headers:
                    continue
                own = tuple(h for h in headers if h[0] != BATCH_HEADER)
                row: OutRow = (topic, m.partition(), m.key(), m.value(), own)
                written[_identity(row)] += 1
                # A row written with partition -1 matches its record too.
                written[_identity((topic, -1, m.key(), m.value(), own))] += 1
        return written

    def publish(self, batch_id: int, rows: Sequence[OutRow]) -> int:
        """Writes batch `batch_id` unless it was written; returns how many records
        this call wrote."""
        marker = self.last_marker()
        if marker is not None and (
            marker.batch > batch_id or (marker.batch == batch_id and marker.state == "done")
        ):
            return 0
        if marker is not None and marker.batch == batch_id:  # died while publishing
            written = self._already_written(batch_id, marker.offsets)
            todo = []
            for row in rows:
                identity = _identity(row)
                if written[identity] > 0:
                    written[identity] -= 1
                else:
                    todo.append(row)
        else:
            topics = sorted({row[0] for row in rows})
            reader = OffsetReader(self._client_config)
            try:
                ends = reader.latest(reader.partitions(Subscription("subscribe", tuple(topics))))
            finally:
                reader.close()
            self._write_marker(Marker(batch_id, "begin", to_json(ends)))
            todo = list(rows)
        sent = self._send(todo, header=f"{self.query_id}:{batch_id}")
        self._write_marker(Marker(batch_id, "done", {}))
        return sent


def from_json_by_topic(offsets: Mapping[str, Mapping[str, int]]) -> dict[str, dict[int, int]]:
    out: dict[str, dict[int, int]] = {}
    for (topic, partition), offset in from_json(offsets).items():
        out.setdefault(topic, {})[partition] = offset
    return out
