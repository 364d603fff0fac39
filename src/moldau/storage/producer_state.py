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
idempotent by default) would otherwise fill memory and every snapshot for ever;
never while its transaction is open.

Transactions (Kafka's ProducerAppendInfo): a producer's first transactional batch
opens its transaction on the partition at that batch's first offset; the marker
(a control batch the coordinator writes) closes it, committed or aborted. A closed
transaction stays "unreplicated" until the high watermark passes its marker: the
first unstable offset is the lowest first offset of the open and unreplicated
transactions, and consumers reading committed data stop below it.
"""

from __future__ import annotations

import os
import struct
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

import crc32c

from moldau.protocol.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceNumberError,
    TransactionCoordinatorFencedError,
)
from moldau.protocol.records import BatchHeader, ControlRecordType
from moldau.storage.checkpoint import write_atomically

BATCHES_TO_RETAIN = 5
# Kafka's producer.id.expiration.ms default (1 day).
PRODUCER_ID_EXPIRATION_MS = 86_400_000
SNAPSHOT_SUFFIX = ".snapshot"
_MAGIC = b"MPSS"
# 2: each producer also holds its coordinator epoch and open transaction's first offset.
_VERSION = 2
_HEAD = struct.Struct(">4shi")
_PRODUCER_V1 = struct.Struct(">qhqB")
_PRODUCER = struct.Struct(">qhqiqB")
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


class AppendOrigin(Enum):
    """Who appends (Kafka's AppendOrigin): a producer's batches have their sequences
    checked and retries recognised; a coordinator's (a transactional offset commit,
    a marker) only their epoch; a follower's copies nothing is checked of."""

    CLIENT = "client"
    COORDINATOR = "coordinator"
    REPLICATION = "replication"


class VerificationGuard:
    """KIP-890 part 1: proof, by identity, that the transaction coordinator was asked
    whether this partition is in the producer's transaction after the broker
    started the verification, and no marker ended a transaction meanwhile (a stale
    answer then fails the append instead of starting a transaction the coordinator
    does not know of). `SENTINEL`: no verification done or needed."""

    __slots__ = ()

    SENTINEL: VerificationGuard


VerificationGuard.SENTINEL = VerificationGuard()


@dataclass(slots=True)
class VerificationStateEntry:
    guard: VerificationGuard
    # The lowest sequence and the epoch of the batches awaiting verification.
    lowest_sequence: int
    epoch: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a marker ended (Kafka's CompletedTxn): its first offset on the
    partition, and the marker's offset."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    epoch: int
    # The maxTimestamp of its last batch as written (the broker's time on a
    # LogAppendTime topic): what expiry measures idleness by.
    last_timestamp: int = -1
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=BATCHES_TO_RETAIN))
    # The first offset of its open transaction on this partition, -1 if none.
    current_txn_first_offset: int = -1
    # Of the last marker written for it: an older coordinator is fenced.
    coordinator_epoch: int = -1

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
        # Open transactions: first offset -> producer id (Kafka's ongoingTxns).
        self._ongoing: dict[int, int] = {}
        # Ended transactions whose marker is not yet below the high watermark, by
        # first offset (Kafka's unreplicatedTxns).
        self._unreplicated: dict[int, CompletedTxn] = {}
        # Producers whose transactional write awaits the coordinator's word (KIP-890).
        self._verifications: dict[int, VerificationStateEntry] = {}

    # -- checks and updates --------------------------------------------------------------

    def check(
        self,
        header: BatchHeader,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        verification_guard: VerificationGuard | None = None,
    ) -> BatchMetadata | None:
        """Validate a batch appended as leader; return the original batch if it is a
        producer's retry. A producer with an open transaction may only write
        transactional batches (INVALID_TXN_STATE, as Kafka's appendDataBatch). A
        coordinator's batches have only their epoch checked. `verification_guard`
        (None: verification is off): a producer's transactional batch that starts
        a transaction must carry the guard its verification started with."""
        if (
            verification_guard is not None
            and origin == AppendOrigin.CLIENT
            and header.is_transactional
            and not self.has_ongoing_transaction(header.producer_id, header.producer_epoch)
            and not self._verified(header.producer_id, verification_guard)
        ):
            raise InvalidTxnStateError(
                f"batch of producer {header.producer_id} is not part of an ongoing transaction"
            )
        entry = self.producers.get(header.producer_id)
        if entry is None:
            return None  # unknown producer: any sequence starts it
        epoch = header.producer_epoch
        if epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"epoch {epoch} of producer {header.producer_id} is older than {entry.epoch}"
            )
        first_seq = header.base_sequence
        if origin != AppendOrigin.CLIENT:
            pass  # Kafka checks a coordinator's sequences not at all
        elif epoch > entry.epoch:
            if first_seq != 0:
                raise OutOfOrderSequenceNumberError(
                    f"sequence {first_seq} of producer {header.producer_id} in new epoch {epoch} "
                    "must start at 0"
                )
        else:
            duplicate = entry.find_duplicate(first_seq, last_sequence(header))
            if duplicate is not None:
                return duplicate
            if entry.batches and first_seq != _next_seq(entry.last_seq):
                raise OutOfOrderSequenceNumberError(
                    f"out of order sequence {first_seq} of producer {header.producer_id} "
                    f"(epoch {epoch}): expected {_next_seq(entry.last_seq)}"
                )
        if entry.current_txn_first_offset >= 0 and not header.is_transactional:
            raise InvalidTxnStateError(
                f"producer {header.producer_id} wrote a non-transactional batch while its "
                f"transaction from offset {entry.current_txn_first_offset} is open"
            )
        return None

    def _verified(self, producer_id: int, guard: VerificationGuard) -> bool:
        entry = self._verifications.get(producer_id)
        return (
            guard is not VerificationGuard.SENTINEL and entry is not None and entry.guard is guard
        )

    def maybe_create_verification_guard(
        self, producer_id: int, sequence: int, epoch: int, now_ms: int
    ) -> VerificationGuard:
        """The guard a transactional write must carry once the coordinator confirms
        the partition is in the transaction (Kafka's maybeCreateVerificationStateEntry);
        the same guard while one is pending."""
        entry = self._verifications.get(producer_id)
        if entry is None:
            entry = VerificationStateEntry(VerificationGuard(), sequence, epoch, now_ms)
            self._verifications[producer_id] = entry
        elif epoch > entry.epoch:
            entry.epoch, entry.lowest_sequence = epoch, sequence
        elif epoch == entry.epoch:
            entry.lowest_sequence = min(entry.lowest_sequence, sequence)
        return entry.guard

    def clear_verification(self, producer_id: int) -> None:
        self._verifications.pop(producer_id, None)

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """Validate a marker the coordinator asks the leader to write: a marker of an
        older producer epoch, or from an older coordinator, is fenced (Kafka's
        checkProducerEpoch and checkCoordinatorEpoch)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"marker epoch {producer_epoch} of producer {producer_id} is older than "
                f"{entry.epoch}"
            )
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"marker of producer {producer_id} from coordinator epoch {coordinator_epoch}, "
                f"older than {entry.coordinator_epoch}"
            )

    def update(
        self,
        header: BatchHeader,
        first_offset: int,
        last_offset: int,
        max_timestamp: int,
        marker: tuple[ControlRecordType, int] | None = None,
    ) -> CompletedTxn | None:
        """Record an appended batch (leader or follower); `max_timestamp`: its
        maxTimestamp as written, which a retry of it is answered with; `marker`:
        (type, coordinator epoch) of a transaction marker. Returns the transaction a
        marker ended, if it had data here: the caller indexes it (if aborted), then
        calls `complete_txn`."""
        completed = None
        if header.producer_id >= 0:
            pid = header.producer_id
            entry = self.producers.get(pid)
            if entry is None:
                entry = ProducerStateEntry(pid, header.producer_epoch)
                self.producers[pid] = entry
            elif header.producer_epoch > entry.epoch:
                # A new epoch's sequences start again; an open transaction stays
                # open until a marker ends it.
                entry.epoch = header.producer_epoch
                entry.batches.clear()
            entry.last_timestamp = max_timestamp
            if header.is_transactional and self._verifications:
                # Verified and started, or ended: a guard handed out before must not
                # start another transaction (KIP-890's ABA case).
                self._verifications.pop(pid, None)
            if header.is_control:
                if marker is not None:
                    kind, coordinator_epoch = marker
                    if entry.current_txn_first_offset >= 0:
                        completed = CompletedTxn(
                            pid,
                            entry.current_txn_first_offset,
                            first_offset,
                            kind == ControlRecordType.ABORT,
                        )
                    entry.current_txn_first_offset = -1
                    entry.coordinator_epoch = coordinator_epoch
            else:
                entry.batches.append(
                    BatchMetadata(
                        header.base_sequence,
                        last_sequence(header),
                        first_offset,
                        last_offset,
                        max_timestamp,
                    )
                )
                if header.is_transactional and entry.current_txn_first_offset < 0:
                    entry.current_txn_first_offset = first_offset
                    self._ongoing[first_offset] = pid
        self.map_end_offset = last_offset + 1
        return completed

    def replay(
        self, header: BatchHeader, marker: tuple[ControlRecordType, int] | None = None
    ) -> CompletedTxn | None:
        """A batch read back from the log (loading, recovery, after a truncation);
        one below what the state already covers is skipped."""
        if header.last_offset < self.map_end_offset:
            return None
        return self.update(
            header, header.base_offset, header.last_offset, header.max_timestamp, marker
        )

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """The LSO once `completed` is decided (Kafka's lastStableOffset): the first
        offset of the oldest other open transaction, else just past its marker."""
        others = [o for o, pid in self._ongoing.items() if pid != completed.producer_id]
        return min(others) if others else completed.last_offset + 1

    def complete_txn(self, completed: CompletedTxn) -> None:
        """`completed` is indexed: it is no longer open, but unstable until the high
        watermark passes its marker."""
        self._ongoing.pop(completed.first_offset, None)
        self._unreplicated[completed.first_offset] = completed

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Transactions whose marker is now below the high watermark are stable."""
        if self._unreplicated:
            for first, txn in list(self._unreplicated.items()):
                if txn.last_offset < high_watermark:
                    del self._unreplicated[first]

    def first_unstable_offset(self) -> int | None:
        """The lowest first offset of the open and the unreplicated transactions."""
        if not self._ongoing and not self._unreplicated:
            return None
        return min(
            min(self._ongoing, default=2**63 - 1), min(self._unreplicated, default=2**63 - 1)
        )

    def has_ongoing_transaction(self, producer_id: int, producer_epoch: int) -> bool:
        """Has the producer, in this epoch, a transaction open here (Kafka's
        hasOngoingTransaction, for KIP-890's verification)?"""
        entry = self.producers.get(producer_id)
        return (
            entry is not None
            and entry.current_txn_first_offset >= 0
            and entry.epoch == producer_epoch
        )

    def ongoing_transactions(self) -> dict[int, ProducerStateEntry]:
        """The producers with an open transaction, by producer id."""
        return {pid: e for pid, e in self.producers.items() if e.current_txn_first_offset >= 0}

    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> int:
        """Forget the producers whose last batch is `expiration_ms` old or older
        (Kafka's test, >=) and that have no open transaction; returns how many."""
        expired = [
            p
            for p, e in self.producers.items()
            if e.current_txn_first_offset < 0 and now_ms - e.last_timestamp >= expiration_ms
        ]
        for pid in expired:
            del self.producers[pid]
        if expired:
            self._expired_since_snapshot = True
        for pid, v in list(self._verifications.items()):
            if now_ms - v.timestamp >= expiration_ms:
                del self._verifications[pid]
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
            body += _PRODUCER.pack(
                e.producer_id,
                e.epoch,
                e.last_timestamp,
                e.coordinator_epoch,
                e.current_txn_first_offset,
                len(e.batches),
            )
            for b in e.batches:
                body += _BATCH.pack(
                    b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp
                )
        body += _CRC.pack(crc32c.crc32c(bytes(body)))
        write_atomically(path, bytes(body), sync)
        self._expired_since_snapshot = False

    def load_latest_snapshot(
        self, max_offset: int, offsets: list[int] | None = None, log_end: int | None = None
    ) -> None:
        """Start from the newest readable snapshot at or below `max_offset`, else
        from nothing. Snapshots above `log_end` (default `max_offset`) describe data
        that is gone and are deleted. `offsets`: those of the snapshots on disk, if
        the caller knows them."""
        self.producers = {}
        self.map_end_offset = 0
        self._expired_since_snapshot = False
        self._ongoing = {}
        self._unreplicated = {}
        if offsets is None:
            offsets = self.snapshot_offsets()
        end = max_offset if log_end is None else log_end
        for offset in reversed(offsets):
            path = self.dir / snapshot_name(offset)
            if offset > end:
                path.unlink(missing_ok=True)
                continue
            if offset > max_offset:
                continue
            try:
                self.producers = read_snapshot(path.read_bytes())
            except (ValueError, struct.error):
                path.unlink(missing_ok=True)  # unreadable: fall back to an older one
                continue
            self.map_end_offset = offset
            self._ongoing = {
                e.current_txn_first_offset: pid
                for pid, e in self.producers.items()
                if e.current_txn_first_offset >= 0
            }
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


def read_snapshot(data: bytes) -> dict[int, ProducerStateEntry]:
    """The producers a `.snapshot` file's bytes hold; ValueError if it is not one
    or fails its CRC."""
    if len(data) < _HEAD.size + _CRC.size:
        raise ValueError("snapshot too short")
    body, (crc,) = data[: -_CRC.size], _CRC.unpack_from(data, len(data) - _CRC.size)
    if crc32c.crc32c(body) != crc:
        raise ValueError("snapshot CRC mismatch")
    magic, version, count = _HEAD.unpack_from(body, 0)
    if magic != _MAGIC or version not in (1, _VERSION):
        raise ValueError("not a producer state snapshot")
    pos = _HEAD.size
    producers: dict[int, ProducerStateEntry] = {}
    for _ in range(count):
        if version == 1:  # before transactions: none open, no coordinator epoch
            pid, epoch, last_ts, n = _PRODUCER_V1.unpack_from(body, pos)
            coordinator_epoch, txn_first = -1, -1
            pos += _PRODUCER_V1.size
        else:
            pid, epoch, last_ts, coordinator_epoch, txn_first, n = _PRODUCER.unpack_from(body, pos)
            pos += _PRODUCER.size
        entry = ProducerStateEntry(
            pid, epoch, last_ts, current_txn_first_offset=txn_first,
            coordinator_epoch=coordinator_epoch,
        )  # fmt: skip
        for _ in range(n):
            entry.batches.append(BatchMetadata(*_BATCH.unpack_from(body, pos)))
            pos += _BATCH.size
        producers[pid] = entry
    return producers
