"""Idempotent producers' state per partition (Kafka's ProducerStateManager).

For each producer id: its epoch and the sequence ranges and offsets of its last five
batches. A leader append of a batch with a producer id is checked against it:
- an older epoch is fenced (INVALID_PRODUCER_EPOCH);
- a retried batch (same sequence range as one of the last five) is a duplicate:
  it is acknowledged with its original offsets and not appended again;
- a sequence that does not follow the last one is OUT_OF_ORDER_SEQUENCE_NUMBER.
Only batch headers are read. The state is snapshotted to `<offset>.snapshot` on roll
and on close, and rebuilt after start-up from the latest snapshot plus the batch
headers after it.

A producer id idle for producer.id.expiration.ms (by the timestamp of its last batch
as written, as Kafka) is forgotten: short-lived producers (every Java client is
idempotent by default) would otherwise fill memory and every snapshot for ever.
"""

from __future__ import annotations

import os
import struct
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import crc32c

from moldau.protocol.errors import InvalidProducerEpochError, OutOfOrderSequenceNumberError
from moldau.protocol.records import BatchHeader
from moldau.storage.checkpoint import write_atomically

BATCHES_TO_RETAIN = 5
# Kafka's producer.id.expiration.ms default (1 day).
PRODUCER_ID_EXPIRATION_MS = 86_400_000
SNAPSHOT_SUFFIX = ".snapshot"
_MAGIC = b"MPSS"
_VERSION = 1
_HEAD = struct.Struct(">4shi")
_PRODUCER = struct.Struct(">qhqB")
_BATCH = struct.Struct(">iiqqq")
_CRC = struct.Struct(">I")
INT_MAX = 2**31 - 1


def _next_seq(seq: int) -> int:
    return 0 if seq == INT_MAX else seq + 1


def last_sequence(header: BatchHeader) -> int:
    return (header.base_sequence + header.last_offset_delta) % (INT_MAX + 1)


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    epoch: int
    # The maxTimestamp of its last batch as written (the broker's time on a
    # LogAppendTime topic): what expiry measures idleness by.
    last_timestamp: int = -1
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=BATCHES_TO_RETAIN))

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    def find_duplicate(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None


def snapshot_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


class ProducerStateManager:
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.producers: dict[int, ProducerStateEntry] = {}
        # The log offset up to which this state is complete.
        self.map_end_offset = 0
        # Producers expired since the state was last loaded or snapshotted: the
        # snapshot of map_end_offset on disk (if any) still holds them.
        self._expired_since_snapshot = False

    # -- checks and updates --------------------------------------------------------------

    def check(self, header: BatchHeader) -> BatchMetadata | None:
        """Validate a leader append; return the original batch if it is a duplicate."""
        entry = self.producers.get(header.producer_id)
        if entry is None:
            return None  # unknown producer: any sequence starts it
        epoch = header.producer_epoch
        if epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"epoch {epoch} of producer {header.producer_id} is older than {entry.epoch}"
            )
        first_seq = header.base_sequence
        if epoch > entry.epoch:
            if first_seq != 0:
                raise OutOfOrderSequenceNumberError(
                    f"sequence {first_seq} of producer {header.producer_id} in new epoch {epoch} "
                    "must start at 0"
                )
            return None
        duplicate = entry.find_duplicate(first_seq, last_sequence(header))
        if duplicate is not None:
            return duplicate
        if entry.batches and first_seq != _next_seq(entry.last_seq):
            raise OutOfOrderSequenceNumberError(
                f"out of order sequence {first_seq} of producer {header.producer_id} "
                f"(epoch {epoch}): expected {_next_seq(entry.last_seq)}"
            )
        return None

    def update(
        self, header: BatchHeader, first_offset: int, last_offset: int, max_timestamp: int
    ) -> None:
        """Record an appended batch (leader or follower); `max_timestamp`: its
        maxTimestamp as written, which a retry of it is answered with."""
        if header.producer_id >= 0:
            entry = self.producers.get(header.producer_id)
            if entry is None or header.producer_epoch > entry.epoch:
                entry = ProducerStateEntry(header.producer_id, header.producer_epoch)
                self.producers[header.producer_id] = entry
            entry.batches.append(
                BatchMetadata(
                    header.base_sequence,
                    last_sequence(header),
                    first_offset,
                    last_offset,
                    max_timestamp,
                )
            )
            entry.last_timestamp = max_timestamp
        self.map_end_offset = last_offset + 1

    def rebuild(self, headers: Iterable[BatchHeader]) -> None:
        for h in headers:
            if h.last_offset < self.map_end_offset:
                continue
            self.update(h, h.base_offset, h.last_offset, h.max_timestamp)

    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> int:
        """Forget the producers whose last batch is `expiration_ms` old or older
        (Kafka's test, >=); returns how many."""
        expired = [
            p for p, e in self.producers.items() if now_ms - e.last_timestamp >= expiration_ms
        ]
        for pid in expired:
            del self.producers[pid]
        if expired:
            self._expired_since_snapshot = True
        return len(expired)

    def last_data_offsets(self) -> dict[int, int]:
        """Each producer's last offset written (Kafka's lastRecordsOfActiveProducers):
        the log cleaner keeps the batch that ends there."""
        return {pid: e.batches[-1].last_offset for pid, e in self.producers.items() if e.batches}

    # -- snapshots -----------------------------------------------------------------------

    def snapshot_offsets(self) -> list[int]:
        return snapshot_offsets(os.listdir(self.dir))

    def take_snapshot(self, sync: bool = True) -> None:
        """Write the state as of map_end_offset, unless a snapshot of that offset is
        on disk already (as Kafka, which snapshots only past its last snapshot's
        offset: a log closed twice without appends writes it once) and no producer
        expired since (unlike Kafka, which would reread the expired ones at the next
        start, filter them out and keep the large file); without `sync` the file is
        not forced to disk (the caller syncs the whole file system)."""
        path = self.dir / snapshot_name(self.map_end_offset)
        if path.exists() and not self._expired_since_snapshot:
            return
        body = bytearray(_HEAD.pack(_MAGIC, _VERSION, len(self.producers)))
        for e in self.producers.values():
            body += _PRODUCER.pack(e.producer_id, e.epoch, e.last_timestamp, len(e.batches))
            for b in e.batches:
                body += _BATCH.pack(
                    b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp
                )
        body += _CRC.pack(crc32c.crc32c(bytes(body)))
        write_atomically(path, bytes(body), sync)
        self._expired_since_snapshot = False

    def load_latest_snapshot(self, max_offset: int, offsets: list[int] | None = None) -> None:
        """Start from the newest readable snapshot at or below `max_offset` (snapshots
        above it describe data that is gone and are deleted); else from nothing.
        `offsets`: those of the snapshots on disk, if the caller knows them."""
        self.producers = {}
        self.map_end_offset = 0
        self._expired_since_snapshot = False
        if offsets is None:
            offsets = self.snapshot_offsets()
        for offset in reversed(offsets):
            path = self.dir / snapshot_name(offset)
            if offset > max_offset:
                path.unlink(missing_ok=True)
                continue
            try:
                self.producers = _read_snapshot(path.read_bytes())
            except (ValueError, struct.error):
                path.unlink(missing_ok=True)  # unreadable: fall back to an older one
                continue
            self.map_end_offset = offset
            return

    def delete_snapshots_before(self, offset: int) -> None:
        """Keep the newest snapshot at or below `offset` and everything after it."""
        offsets = self.snapshot_offsets()
        keep = max((o for o in offsets if o <= offset), default=None)
        for o in offsets:
            if o < offset and o != keep:
                (self.dir / snapshot_name(o)).unlink(missing_ok=True)

    def delete_all_snapshots(self) -> None:
        for o in self.snapshot_offsets():
            (self.dir / snapshot_name(o)).unlink(missing_ok=True)


def snapshot_offsets(names: Iterable[str]) -> list[int]:
    """The offsets of the producer state snapshots among these file names, in order."""
    return sorted(
        int(stem)
        for name in names
        if name.endswith(SNAPSHOT_SUFFIX) and (stem := name[: -len(SNAPSHOT_SUFFIX)]).isdigit()
    )


def _read_snapshot(data: bytes) -> dict[int, ProducerStateEntry]:
    if len(data) < _HEAD.size + _CRC.size:
        raise ValueError("snapshot too short")
    body, (crc,) = data[: -_CRC.size], _CRC.unpack_from(data, len(data) - _CRC.size)
    if crc32c.crc32c(body) != crc:
        raise ValueError("snapshot CRC mismatch")
    magic, version, count = _HEAD.unpack_from(body, 0)
    if magic != _MAGIC or version != _VERSION:
        raise ValueError("not a producer state snapshot")
    pos = _HEAD.size
    producers: dict[int, ProducerStateEntry] = {}
    for _ in range(count):
        pid, epoch, last_ts, n = _PRODUCER.unpack_from(body, pos)
        pos += _PRODUCER.size
        entry = ProducerStateEntry(pid, epoch, last_ts)
        for _ in range(n):
            entry.batches.append(BatchMetadata(*_BATCH.unpack_from(body, pos)))
            pos += _BATCH.size
        producers[pid] = entry
    return producers
