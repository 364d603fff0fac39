"""A Spark task's write by building record batches itself (moldau.spark.record_build)
and sending them with Produce requests: the default write path, with no Python
object per row.

It writes what the confluent-kafka path (moldau.spark.writer.RecordWriter) writes:
an idempotent producer (a producer id from InitProducerId, a sequence per
partition, acks=all), each row to the `topic` option's topic or else its `topic`
column's, a row with a `partition` goes there, a keyed row to murmur2 of its key
modulo the partitions (Kafka's Java partitioner, the client path's
`murmur2_random`), and rows with neither to one partition a topic per Arrow batch
(as the Java producer's sticky partitioner), each record with its `headers` and
stamped with the time its batch was built (CreateTime), a batch's records
compressed as `compression.type` says (with the broker's codecs,
moldau.protocol.records). One Produce request a leader is in flight while the next
Arrow batch is built; a retriable error (the leader moved, not enough replicas, a broker
gone) sends the same batch, with the same sequence, again, after looking the
leaders up, until `delivery.timeout.ms`; the broker drops the duplicate a retry may
make. Any other error fails the task, as on the client path.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from moldau.protocol.apis import ApiKey
from moldau.protocol.errors import ErrorCode
from moldau.protocol.records import Compression, compress, wrap_records
from moldau.spark import fetch_client, record_build
from moldau.spark.fetch_client import (
    Address,
    BrokerError,
    Connection,
    parse_bootstrap,
)
from moldau.spark.writer import row_topics

#: Versions this path speaks: Produce v3 is the first with v2 record batches.
VERSIONS = {
    ApiKey.PRODUCE: (3, 9),
    ApiKey.METADATA: (1, 12),
    ApiKey.INIT_PRODUCER_ID: (0, 4),
}
_BACKOFF_S = 0.1
#: Produce requests in flight at most: a broker remembers the last five batches of
#: a producer a partition, so a retry of an older one would be out of order (the
#: Java producer's limit with idempotence, max.in.flight.requests.per.connection).
MAX_IN_FLIGHT = 5

#: Errors after which the same batch is sent again (the Java producer's retriable
#: ones a Produce answer carries), after looking the leaders up again.
RETRIABLE = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.leader_not_available,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.request_timed_out,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
        ErrorCode.network_exception,
        ErrorCode.kafka_storage_error,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.concurrent_transactions,
    }
)


#: A partition of a topic.
TP = tuple[str, int]

#: The codecs of `compression.type` (librdkafka's `compression.codec` alike).
CODECS = {
    "none": Compression.NONE,
    "gzip": Compression.GZIP,
    "snappy": Compression.SNAPPY,
    "lz4": Compression.LZ4,
    "zstd": Compression.ZSTD,
}


class ProduceFailed(Exception):
    """A record could not be written: the task fails, as on the client path."""


def compression_of(client_config: Mapping[str, str]) -> tuple[Compression, int | None]:
    """The codec and its level: Kafka's `compression.<codec>.level`, else
    librdkafka's `compression.level` (-1: the codec's default), else the codec's
    default."""
    c = client_config
    name = (c.get("compression.type") or c.get("compression.codec") or "none").strip().lower()
    codec = CODECS[name]
    raw = c.get(f"compression.{name}.level") or c.get("compression.level")
    level = None if raw is None or int(raw) == -1 else int(raw)
    return codec, level


@dataclass(frozen=True, slots=True)
class WriteSettings:
    """What of the `kafka.*` settings this path honours."""

    bootstrap: list[Address]
    client_id: str
    request_timeout_s: float
    delivery_timeout_s: float
    #: The most bytes of records in one batch (librdkafka's batch.size default, as on
    #: the client path), before compression; the broker refuses batches over its
    #: max.message.bytes.
    batch_bytes: int = 1_000_000
    compression: Compression = Compression.NONE
    compression_level: int | None = None

    @classmethod
    def of(cls, client_config: Mapping[str, str]) -> WriteSettings:
        c = client_config
        request_ms = c.get("request.timeout.ms") or c.get("socket.timeout.ms") or "30000"
        delivery_ms = c.get("delivery.timeout.ms") or c.get("message.timeout.ms") or "120000"
        codec, level = compression_of(c)
        return cls(
            parse_bootstrap(c["bootstrap.servers"]),
            c.get("client.id", "moldau-spark"),
            int(request_ms) / 1000,
            int(delivery_ms) / 1000,
            int(c.get("batch.size") or 1_000_000),
            codec,
            level,
        )


@dataclass(slots=True)
class _Pending:
    """A Produce request in flight: its batches by partition."""

    conn: Connection
    version: int
    batches: dict[TP, bytes] = field(default_factory=dict)


class BatchWriter:
    """Writes a task's Arrow batches to `topic`, or with None to each row's `topic`
    column's; `close()` waits for every answer and raises the first failure. Not
    thread-safe: a task's own."""

    def __init__(
        self,
        client_config: Mapping[str, str],
        topic: str | None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        connect: Callable[[Address, str, float], Connection] | None = None,
    ) -> None:
        """`connect`: opens a connection with versions agreed (tests pass a fake)."""
        self.settings = WriteSettings.of(client_config)
        self.topic = topic
        self._clock = clock
        self._sleep = sleep
        self._now_ms = now_ms
        self._open = connect or open_connection
        self._conns: dict[Address, Connection] = {}
        #: Each topic's partitions' leaders, looked up when a row first goes there.
        self._leaders: dict[str, dict[int, Address]] = {}
        self._sequences: dict[TP, int] = {}
        self._pending: list[_Pending] = []
        self._sticky = random.randrange(1 << 30)
        self.count = 0
        try:
            if topic is not None:
                self._load_leaders([topic])
            self._producer_id, self._epoch = self._init_producer_id()
        except BaseException:
            self._close_connections()
            raise

    # -- connections and metadata -------------------------------------------------

    def _connect(self, address: Address) -> Connection:
        conn = self._conns.get(address)
        if conn is None:
            conn = self._open(address, self.settings.client_id, self.settings.request_timeout_s)
            self._conns[address] = conn
        return conn

    def _drop(self, address: Address) -> None:
        conn = self._conns.pop(address, None)
        if conn is not None:
            conn.close()

    def _close_connections(self) -> None:
        for address in list(self._conns):
            self._drop(address)

    def _any_connection(self) -> Connection:
        errors = []
        for address in [*self._conns, *self.settings.bootstrap]:
            try:
                return self._connect(address)
            except BrokerError as e:
                errors.append(str(e))
        raise BrokerError("no broker answered: " + "; ".join(errors))

    def _load_leaders(self, topics: list[str]) -> None:
        """The topics' partitions and their leaders, retried until the delivery timeout."""
        deadline = self._clock() + self.settings.delivery_timeout_s
        wanted = set(topics)
        while True:
            try:
                conn = self._any_connection()
                answer = conn.call(
                    ApiKey.METADATA,
                    conn.versions[ApiKey.METADATA],
                    # As a producer's (allow.auto.create.topics): a broker with
                    # auto.create.topics.enable makes the topic, as for the client path.
                    {
                        "topics": [{"name": t} for t in sorted(wanted)],
                        "allow_auto_topic_creation": True,
                    },
                )
            except BrokerError as e:
                self._close_connections()
                if self._clock() > deadline:
                    raise ProduceFailed(f"writing to {', '.join(sorted(wanted))}: {e}") from e
                self._sleep(_BACKOFF_S)
                continue
            brokers = {b.node_id: (b.host, b.port) for b in answer.brokers}
            for t in answer.topics:
                if t.name not in wanted:
                    continue
                if t.error_code == ErrorCode.none and t.partitions:
                    leaders = {
                        int(p.partition_index): brokers.get(p.leader_id) for p in t.partitions
                    }
                    if all(a is not None for a in leaders.values()):
                        self._leaders[t.name] = {p: a for p, a in leaders.items() if a is not None}
                        wanted.discard(t.name)
                elif t.error_code not in RETRIABLE:
                    raise ProduceFailed(f"writing to {t.name}: {_name(int(t.error_code))}")
            if not wanted:
                return
            if self._clock() > deadline:
                raise ProduceFailed(f"Topic {min(wanted)} not present in metadata")
            self._sleep(_BACKOFF_S)

    def _init_producer_id(self) -> tuple[int, int]:
        deadline = self._clock() + self.settings.delivery_timeout_s
        while True:
            try:
                conn = self._any_connection()
                answer = conn.call(
                    ApiKey.INIT_PRODUCER_ID,
                    conn.versions[ApiKey.INIT_PRODUCER_ID],
                    {"transactional_id": None, "transaction_timeout": 60_000},
                )
                error = int(answer.error_code)
            except BrokerError as e:
                self._close_connections()
                error, why = int(ErrorCode.network_exception), str(e)
            else:
                if error == ErrorCode.none:
                    return int(answer.producer_id), int(answer.producer_epoch)
                why = _name(error)
            if error not in RETRIABLE and error != ErrorCode.coordinator_not_available:
                raise ProduceFailed(f"InitProducerId: {why}")
            if self._clock() > deadline:
                raise ProduceFailed(f"InitProducerId: {why}")
            self._sleep(_BACKOFF_S)

    # -- writing --------------------------------------------------------------------

    def _row_topics(self, batch: pa.RecordBatch) -> tuple[list[str], Any]:
        """The topics the batch's rows go to, and each row's index among them."""
        if self.topic is not None:
            return [self.topic], np.zeros(batch.num_rows, dtype=np.int32)
        encoded = pc.dictionary_encode(row_topics(batch))
        return encoded.dictionary.to_pylist(), np.asarray(encoded.indices, dtype=np.int32)

    def _row_partitions(
        self, batch: pa.RecordBatch, key: record_build.BinaryColumn | None, counts: Any
    ) -> Any:
        """Each row's partition; `counts`: each row's topic's partitions."""
        n = batch.num_rows
        self._sticky += 1
        sticky = (self._sticky % counts).astype(np.int32)
        if key is not None:
            parts = np.empty(n, dtype=np.int32)
            for count in np.unique(counts).tolist():
                same = counts == count
                parts[same] = record_build.key_partitions(key, n, count)[same]
            parts = np.where(parts < 0, sticky, parts)
        else:
            parts = sticky
        if "partition" in batch.schema.names:
            given = batch.column("partition")
            chosen = np.asarray(given.fill_null(-1), dtype=np.int32)
            parts = np.where(chosen >= 0, chosen, parts)
        return parts

    def write(self, batch: pa.RecordBatch) -> None:
        n = batch.num_rows
        if n == 0:
            return
        value = record_build.BinaryColumn.of(batch.column("value"))
        key = (
            record_build.BinaryColumn.of(batch.column("key"))
            if "key" in batch.schema.names
            else None
        )
        headers = (
            record_build.HeaderColumn.of(batch.column("headers"))
            if "headers" in batch.schema.names
            else None
        )
        topics, topic_of = self._row_topics(batch)
        unseen = [t for t in topics if t not in self._leaders]
        if unseen:
            self._load_leaders(unseen)
        counts = np.array([len(self._leaders[t]) for t in topics], dtype=np.int64)[topic_of]
        parts = self._row_partitions(batch, key, counts)
        unknown = np.flatnonzero((parts < 0) | (parts >= counts))
        if len(unknown):
            row = int(unknown[0])
            raise ProduceFailed(
                f"partition {int(parts[row])} of {topics[topic_of[row]]} does not exist "
                f"(it has {int(counts[row])})"
            )
        # Rows by topic, then partition, in their order within each.
        place = topic_of.astype(np.int64) * (int(counts.max()) + 1) + parts
        order = np.argsort(place, kind="stable")
        bounds = np.flatnonzero(np.diff(place[order])) + 1
        sizes = _record_sizes(key, value, headers)
        stamp = self._now_ms()
        codec, level = self.settings.compression, self.settings.compression_level
        chunks: dict[TP, list[bytes]] = {}
        for rows in np.split(order, bounds):
            tp = (topics[topic_of[rows[0]]], int(parts[rows[0]]))
            for chunk in _split(rows, sizes, self.settings.batch_bytes):
                sequence = self._sequences.get(tp, 0)
                records = record_build.build(key, value, chunk.astype(np.int64), headers)
                chunks.setdefault(tp, []).append(
                    wrap_records(
                        compress(codec, records, level),
                        len(chunk),
                        base_timestamp=stamp,
                        max_timestamp=stamp,
                        compression=codec,
                        producer_id=self._producer_id,
                        producer_epoch=self._epoch,
                        base_sequence=sequence,
                    )
                )
                # Kafka's sequences wrap at Integer.MAX_VALUE.
                self._sequences[tp] = (sequence + len(chunk)) & 0x7FFFFFFF
        self._complete()
        self._send(chunks)
        self.count += n

    def _by_leader(self, batches: dict[TP, bytes]) -> dict[Address, dict[TP, bytes]]:
        out: dict[Address, dict[TP, bytes]] = {}
        for (t, p), b in batches.items():
            out.setdefault(self._leaders[t][p], {})[(t, p)] = b
        return out

    def _send_to(self, address: Address, group: dict[TP, bytes]) -> _Pending:
        """A Produce request of `group` to `address`; BrokerError if it cannot go."""
        try:
            conn = self._connect(address)
            version = conn.versions[ApiKey.PRODUCE]
            conn.send(ApiKey.PRODUCE, version, self._request(group))
        except BrokerError:
            self._drop(address)
            raise
        return _Pending(conn, version, group)

    def _send(self, chunks: dict[TP, list[bytes]]) -> None:
        """Each partition's batches in order, one a request (Produce v3 and later
        take one batch a partition), all in flight until the next write."""
        unsent: dict[TP, list[bytes]] = {}
        for j in range(max(len(c) for c in chunks.values())):
            group = {p: c[j] for p, c in chunks.items() if j < len(c)}
            for p in [p for p in group if p in unsent]:
                unsent[p].append(group.pop(p))  # after its partition's unsent one
            for address, leaders_group in self._by_leader(group).items():
                if len(self._pending) >= MAX_IN_FLIGHT:
                    self._complete()
                try:
                    self._pending.append(self._send_to(address, leaders_group))
                except BrokerError:
                    for p, b in leaders_group.items():
                        unsent.setdefault(p, []).append(b)
        if unsent:
            # What is in flight goes first, then these, in order, synchronously.
            self._complete()
            self._retry(unsent, "the leader could not be reached")

    def _request(self, group: dict[TP, bytes]) -> dict[str, Any]:
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (t, p), b in group.items():
            by_topic.setdefault(t, []).append({"index": p, "records": b})
        return {
            "transactional_id": None,
            "acks": -1,
            "timeout": int(self.settings.request_timeout_s * 1000),
            "topic_data": [{"name": t, "partition_data": ps} for t, ps in by_topic.items()],
        }

    def _answer(self, pending: _Pending) -> dict[TP, int]:
        """Each partition's error in the answer (network_exception for all if none came)."""
        try:
            answer = pending.conn.receive(ApiKey.PRODUCE, pending.version)
        except BrokerError:
            self._drop(pending.conn.address)
            return dict.fromkeys(pending.batches, int(ErrorCode.network_exception))
        errors = dict.fromkeys(pending.batches, int(ErrorCode.network_exception))
        for t in answer.responses:
            for p in t.partition_responses:
                if (t.name, int(p.index)) in errors:
                    errors[(t.name, int(p.index))] = int(p.error_code)
        return errors

    def _complete(self) -> None:
        """Read every answer in flight; send again, in order, what a retriable
        error refused and what its partition had in flight after it."""
        pending, self._pending = self._pending, []
        failed: dict[TP, list[bytes]] = {}
        error = ErrorCode.none
        for request in pending:
            for p, e in self._answer(request).items():
                if p in failed:
                    # Refused as out of order after the failed one, or not seen:
                    # it goes again after it.
                    if e not in (ErrorCode.none, ErrorCode.duplicate_sequence_number):
                        failed[p].append(request.batches[p])
                    continue
                if e in (ErrorCode.none, ErrorCode.duplicate_sequence_number):
                    continue
                if e not in RETRIABLE:
                    raise ProduceFailed(f"writing to {p[0]}-{p[1]}: {_name(e)}")
                failed[p] = [request.batches[p]]
                error = ErrorCode(e)
        if failed:
            self._retry(failed, _name(error))

    def _retry(self, queues: dict[TP, list[bytes]], why: str) -> None:
        """Send each partition's queued batches again, in order, one request at a
        time, until accepted or delivery.timeout.ms passed."""
        deadline = self._clock() + self.settings.delivery_timeout_s
        refused = True
        while queues:
            if self._clock() > deadline:
                topics = ", ".join(sorted({t for t, _ in queues}))
                raise ProduceFailed(f"writing to {topics}: {why}, still after delivery.timeout.ms")
            if refused:
                self._sleep(_BACKOFF_S)
                self._load_leaders(sorted({t for t, _ in queues}))
            refused = False
            heads = {p: q[0] for p, q in queues.items()}
            for address, group in self._by_leader(heads).items():
                try:
                    pending = self._send_to(address, group)
                except BrokerError as unreachable:
                    why, refused = str(unreachable), True
                    continue
                for p, error in self._answer(pending).items():
                    if error in (ErrorCode.none, ErrorCode.duplicate_sequence_number):
                        queues[p].pop(0)
                        if not queues[p]:
                            del queues[p]
                    elif error not in RETRIABLE:
                        raise ProduceFailed(f"writing to {p[0]}-{p[1]}: {_name(error)}")
                    else:
                        why, refused = _name(error), True

    def close(self) -> None:
        """Wait for every answer; raise the first failure."""
        try:
            self._complete()
        finally:
            self._close_connections()

    def abort(self) -> None:
        """Drop what is in flight (the task failed)."""
        self._pending = []
        self._close_connections()


def _record_sizes(
    key: record_build.BinaryColumn | None,
    value: record_build.BinaryColumn,
    headers: record_build.HeaderColumn | None,
) -> Any:
    """Each row's record size, at most: its key, value and headers and their varints."""
    sizes = np.diff(value.offsets).astype(np.int64) + 25
    if key is not None:
        sizes += np.diff(key.offsets)
    if headers is not None:
        # Each header's key and value and 10 bytes of their lengths' varints.
        entry = np.diff(headers.keys.offsets).astype(np.int64)
        entry += np.diff(headers.values.offsets) + 10
        ends = np.concatenate(([0], np.cumsum(entry)))
        sizes += ends[headers.offsets[1:]] - ends[headers.offsets[:-1]]
    return sizes


def _split(rows: Any, sizes: Any, limit: int) -> list[Any]:
    """`rows` in runs of at most `limit` bytes of records (a larger record alone)."""
    total = np.cumsum(sizes[rows])
    if total[-1] <= limit:
        return [rows]
    out = []
    start, base = 0, 0
    while start < len(rows):
        end = max(int(np.searchsorted(total, base + limit, side="right")), start + 1)
        out.append(rows[start:end])
        base = int(total[end - 1])
        start = end
    return out


def open_connection(address: Address, client_id: str, timeout_s: float) -> Connection:
    return fetch_client.open_connection(address, client_id, timeout_s, VERSIONS)


def _name(error: int) -> str:
    try:
        return ErrorCode(error).name.upper()
    except ValueError:
        return f"error {error}"
